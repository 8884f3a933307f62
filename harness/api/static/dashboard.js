// The dashboard: reloads its server-rendered panels, counts running ticks' runtime up each
// second, and sends the pause, resume, run-now and chart-unit buttons' requests.
"use strict";

(function () {
  const panels = document.getElementById("panels");
  let chart = "tokens";

  function showRuntimes() {
    const now = Date.now();
    panels.querySelectorAll(".runtime[data-since]").forEach(function (cell) {
      const seconds = Math.max(0, (now - Date.parse(cell.dataset.since)) / 1000);
      cell.textContent = seconds.toFixed(0) + " s";
    });
  }

  function load() {
    return tickwork.call("/dashboard/panels?chart=" + chart)
      .then(function (answer) { return answer.text(); })
      .then(function (html) {
        panels.innerHTML = html;
        showRuntimes();
        tickwork.say("live, updated " + tickwork.utcNow());
      })
      .catch(function (problem) { tickwork.say("not updated: " + problem.message, true); });
  }

  function switchLevel(button, level, action) {
    button.disabled = true;
    tickwork.call("/levels/" + encodeURIComponent(level) + "/" + action, "POST")
      .then(load)
      .catch(function (problem) {
        tickwork.say(action + " failed: " + problem.message, true);
        button.disabled = false;
      });
  }

  panels.addEventListener("click", function (event) {
    const pause = event.target.closest("button[data-pause]");
    const resume = event.target.closest("button[data-resume]");
    const run = event.target.closest("button[data-run]");
    const unit = event.target.closest("button[data-chart]");
    if (unit) {
      chart = unit.dataset.chart;
      load();
    } else if (pause) {
      switchLevel(pause, pause.dataset.pause, "pause");
    } else if (resume) {
      switchLevel(resume, resume.dataset.resume, "resume");
    } else if (run) {
      tickwork.start(run, "/levels/" + encodeURIComponent(run.dataset.run) + "/tick", "run now");
    }
  });

  const seconds = Number(panels.dataset.refreshSeconds) || 5;
  load();
  setInterval(load, seconds * 1000);
  setInterval(showRuntimes, 1000);
})();
