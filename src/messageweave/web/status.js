// Card 1, service status: ready, setup mode (with the missing variables) or unknown.
import { api, session } from "./api.js";
import { $, fillList, say } from "./dom.js";
import { t } from "./i18n.js";

export async function loadStatus() {
  say("setup-summary", t("setup.checking"));
  $("setup-missing-box").hidden = true;
  try {
    const status = await api("GET", "/api/status");
    $("setup-version").textContent = status.version || "—";
    if (status.ready === true) {
      say("setup-summary", t("setup.ready"), "ok");
      if (!session.token) $("auth-card").hidden = false;
    } else if (status.mode === "configuration-setup") {
      say("setup-summary", t("setup.setupMode"), "error");
      fillList("setup-missing", (status.missing || []).filter(function (name) {
        return name === "REDIS_URL" || name === "CONFIG_ENCRYPTION_KEY";
      }));
      $("setup-missing-box").hidden = false;
      $("auth-card").hidden = true;
    } else {
      say("setup-summary", t("setup.unknown"), "error");
      $("auth-card").hidden = true;
    }
  } catch (err) {
    say("setup-summary", t("setup.unknown"), "error");
    $("auth-card").hidden = true;
  }
}

export function wire() {
  $("setup-recheck").addEventListener("click", loadStatus);
}
