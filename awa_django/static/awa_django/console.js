// awa_django console: "select all" for the bulk-action tables and the
// dashboard's pausable auto-refresh (the choice is kept in localStorage).
(function () {
  "use strict";
  var toggle = document.getElementById("action-toggle");
  if (toggle) {
    toggle.addEventListener("change", function () {
      document.querySelectorAll("input.action-select").forEach(function (box) {
        box.checked = toggle.checked;
      });
    });
  }
  var refresh = document.getElementById("awa-autorefresh");
  if (refresh) {
    var key = "awa-autorefresh";
    refresh.checked = window.localStorage.getItem(key) !== "off";
    var seconds = parseInt(refresh.dataset.seconds, 10) || 30;
    var timer = null;
    var arm = function () {
      if (timer) { window.clearTimeout(timer); timer = null; }
      if (refresh.checked) { timer = window.setTimeout(function () { window.location.reload(); }, seconds * 1000); }
    };
    refresh.addEventListener("change", function () {
      window.localStorage.setItem(key, refresh.checked ? "on" : "off");
      arm();
    });
    arm();
  }
})();
