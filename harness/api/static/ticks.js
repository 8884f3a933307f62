// The tick list: the form's filters become the query of /dashboard/ticks (and the page's
// own address, so a filtered list can be bookmarked); a bad filter shows the API's 422.
"use strict";

(function () {
  const form = document.getElementById("filters");
  const list = document.getElementById("list");

  function query() {
    const params = new URLSearchParams();
    const data = new FormData(form);
    String(data.get("level") || "").split(",").forEach(function (level) {
      if (level.trim()) {
        params.append("level", level.trim());
      }
    });
    ["status", "since", "limit", "text"].forEach(function (name) {
      const value = String(data.get(name) || "").trim();
      if (value) {
        params.set(name, value);
      }
    });
    return params;
  }

  function load() {
    const params = query();
    history.replaceState(null, "", location.pathname + "?" + params.toString());
    return tickwork.call("/dashboard/ticks?" + params.toString())
      .then(function (answer) { return answer.text(); })
      .then(function (html) {
        list.innerHTML = html;
        tickwork.say("updated " + tickwork.utcNow());
      })
      .catch(function (problem) { tickwork.say(problem.message, true); });
  }

  const initial = new URLSearchParams(location.search);
  form.elements.level.value = initial.getAll("level").join(",");
  ["status", "since", "limit", "text"].forEach(function (name) {
    if (initial.get(name)) {
      form.elements[name].value = initial.get(name);
    }
  });
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    load();
  });
  load();
})();
