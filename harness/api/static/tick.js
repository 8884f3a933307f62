// A tick's page: its story, why it ended, result and log, from /dashboard/ticks/<id>; while
// the tick runs, /ticks/<id>/stream adds each event and the log's new text as they are
// recorded, and says anew where the tick stands (the call in flight, the next attempt)
// after each batch (server-sent events, read with fetch so the bearer token goes along).
"use strict";

(function () {
  const main = document.getElementById("tick");
  const tickId = decodeURIComponent(location.pathname.split("/").pop());
  const path = "/dashboard/ticks/" + encodeURIComponent(tickId);
  document.title = "tickwork: " + tickId;

  function fragment() {
    return tickwork.call(path).then(function (answer) { return answer.text(); });
  }

  function load() {
    fragment()
      .then(function (html) {
        main.innerHTML = html;
        const story = document.getElementById("story");
        if (story.dataset.ended === "true") {
          tickwork.say("ended");
        } else {
          const log = document.getElementById("log");
          follow(Number(story.dataset.after), Number((log && log.dataset.end) || 0));
        }
      })
      .catch(function (problem) {
        if (problem.status === 404) {
          tickwork.say("waiting for the tick to be recorded…");
          setTimeout(load, 1000);
        } else {
          tickwork.say(problem.message, true);
        }
      });
  }

  // After the end: the summary, result and log as they are now; the story stays as it grew.
  function refreshAround() {
    fragment().then(function (html) {
      const fresh = document.createElement("div");
      fresh.innerHTML = html;
      ["summary", "result", "log"].forEach(function (id) {
        document.getElementById(id).replaceWith(fresh.querySelector("#" + id));
      });
    });
  }

  function appendLog(text) {
    let pre = document.getElementById("log-text");
    if (!pre) {
      const section = document.getElementById("log");
      section.innerHTML = "<h2>Log</h2>";
      pre = document.createElement("pre");
      pre.id = "log-text";
      section.appendChild(pre);
    }
    if (pre.dataset.empty) {
      pre.textContent = "";
      delete pre.dataset.empty;
    }
    pre.textContent += text;
  }

  function handle(kind, data) {
    const story = document.getElementById("story");
    if (kind === "story") {
      const list = document.getElementById("events");
      list.insertAdjacentHTML("beforeend", data);
      const item = list.lastElementChild;
      item.classList.add("live");
      story.dataset.after = item.dataset.position;
    } else if (kind === "now") {
      const now = document.getElementById("now");
      if (now) {
        now.outerHTML = data;
      }
    } else if (kind === "log") {
      appendLog(data);
    } else if (kind === "end") {
      story.dataset.ended = "true";
      tickwork.say("ended " + tickwork.utcNow());
      refreshAround();
    }
  }

  function follow(after, logFrom) {
    tickwork.say("live: following the running tick");
    const url = "/ticks/" + encodeURIComponent(tickId) + "/stream?after=" + after +
      "&log_from=" + logFrom;
    tickwork.call(url).then(function (answer) {
      const reader = answer.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      function pump() {
        return reader.read().then(function (chunk) {
          if (chunk.done) {
            return;
          }
          buffer += decoder.decode(chunk.value, { stream: true });
          let cut = buffer.indexOf("\n\n");
          while (cut >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            let kind = "message";
            const data = [];
            block.split("\n").forEach(function (field) {
              if (field.startsWith("event: ")) {
                kind = field.slice(7);
              } else if (field.startsWith("data: ")) {
                data.push(field.slice(6));
              }
            });
            if (data.length) {
              handle(kind, data.join("\n"));
            }
            cut = buffer.indexOf("\n\n");
          }
          return pump();
        });
      }
      return pump();
    }).then(function () {
      const story = document.getElementById("story");
      if (story && story.dataset.ended !== "true") {  // the connection dropped: pick up again
        setTimeout(load, 2000);
      }
    }).catch(function (problem) { tickwork.say("not live: " + problem.message, true); });
  }

  main.addEventListener("click", function (event) {
    const again = event.target.closest("button[data-rerun]");
    if (again) {
      tickwork.start(again, "/ticks/" + encodeURIComponent(again.dataset.rerun) + "/rerun",
        "run again");
      return;
    }
    const button = event.target.closest("button[data-cancel]");
    if (!button) {
      return;
    }
    button.disabled = true;
    button.textContent = "cancelling…";
    tickwork.call("/cancel/" + encodeURIComponent(button.dataset.cancel), "POST")
      .catch(function (problem) {
        tickwork.say("cancel failed: " + problem.message, true);
        button.disabled = false;
        button.textContent = "Cancel this tick";
      });
  });

  load();
})();
