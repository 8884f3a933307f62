// The dashboard: reloads its server-rendered panels, counts running ticks' runtime up each
// second, and sends a resume button's request. With a token, open the page as
// /#token=<TICKWORK_API_TOKEN>: the fragment never reaches a server or its logs.
"use strict";

(function () {
  const panels = document.getElementById("panels");
  const state = document.getElementById("state");
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem("tickwork-token", fromHash);
    history.replaceState(null, "", location.pathname);
  }
  const token = sessionStorage.getItem("tickwork-token");

  function call(path, method) {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    return fetch(path, { method: method || "GET", headers: headers }).then(function (answer) {
      if (!answer.ok) {
        return answer.text().then(function (text) {
          throw new Error(path + ": HTTP " + answer.status + " " + text);
        });
      }
      return answer;
    });
  }

  function showRuntimes() {
    const now = Date.now();
    panels.querySelectorAll(".runtime[data-since]").forEach(function (cell) {
      const seconds = Math.max(0, (now - Date.parse(cell.dataset.since)) / 1000);
      cell.textContent = seconds.toFixed(0) + " s";
    });
  }

  function load() {
    return call("/dashboard/panels")
      .then(function (answer) { return answer.text(); })
      .then(function (html) {
        panels.innerHTML = html;
        showRuntimes();
        state.textContent = "live, updated " + new Date().toLocaleTimeString();
        state.className = "meta";
      })
      .catch(function (problem) {
        state.textContent = "not updated: " + problem.message;
        state.className = "meta error";
      });
  }

  panels.addEventListener("click", function (event) {
    const button = event.target.closest("button[data-resume]");
    if (!button) {
      return;
    }
    button.disabled = true;
    call("/levels/" + encodeURIComponent(button.dataset.resume) + "/resume", "POST")
      .then(load)
      .catch(function (problem) {
        state.textContent = "resume failed: " + problem.message;
        state.className = "meta error";
        button.disabled = false;
      });
  });

  const seconds = Number(panels.dataset.refreshSeconds) || 5;
  load();
  setInterval(load, seconds * 1000);
  setInterval(showRuntimes, 1000);
})();
