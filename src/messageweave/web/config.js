"use strict";
// Status card: reads /api/status (always 200) and shows the mode and any missing variables.
(function () {
  const FETCH = {
    credentials: "omit",
    cache: "no-store",
    redirect: "error",
    referrerPolicy: "no-referrer",
    headers: { Accept: "application/json" },
  };

  function text(id, value) {
    document.getElementById(id).textContent = value;
  }

  async function loadStatus() {
    text("status-summary", "Checking…");
    try {
      const response = await fetch("/api/status", FETCH);
      const status = await response.json();
      text("status-mode", status.mode);
      text("status-missing", status.missing.length ? status.missing.join(", ") : "none");
      text("status-version", status.version);
      text(
        "status-summary",
        status.ready
          ? "Configured. Sign in to edit the settings."
          : "Setup mode: set the missing environment variables and restart.",
      );
    } catch (err) {
      text("status-summary", "Status unavailable: " + err.message);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.getElementById("status-recheck").addEventListener("click", loadStatus);
    loadStatus();
  });
})();
