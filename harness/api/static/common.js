// What every page shares: the token (from /#token=… once, then this tab's sessionStorage;
// a URL fragment never reaches a server or its logs), requests that carry it, the buttons
// that start a tick, and the line in the header that says whether the page is live.
"use strict";

const tickwork = (function () {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem("tickwork-token", fromHash);
    history.replaceState(null, "", location.pathname + location.search);
  }
  const token = sessionStorage.getItem("tickwork-token");
  const state = document.getElementById("state");

  function call(path, method) {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    return fetch(path, { method: method || "GET", headers: headers }).then(function (answer) {
      if (!answer.ok) {
        return answer.text().then(function (text) {
          const problem = new Error(path + ": HTTP " + answer.status + " " + text);
          problem.status = answer.status;
          throw problem;
        });
      }
      return answer;
    });
  }

  function utcNow() {
    return new Date().toISOString().slice(11, 19) + " UTC";
  }

  function say(text, isError) {
    state.textContent = text;
    state.className = isError ? "meta error" : "meta";
  }

  // A button that starts a tick (run now, run again): the page of the tick it started opens.
  function start(button, path, what) {
    button.disabled = true;
    return call(path, "POST")
      .then(function (answer) { return answer.json(); })
      .then(function (started) { location.assign(started.page); })
      .catch(function (problem) {
        say(what + " failed: " + problem.message, true);
        button.disabled = false;
      });
  }

  return { call: call, say: say, start: start, utcNow: utcNow };
})();
