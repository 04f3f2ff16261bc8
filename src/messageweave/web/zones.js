// The time-zone select of the business form: the shortlist first, then every zone the
// backend accepts, narrowed by the search box.
import { $ } from "./dom.js";

// static.py replaces the marker list below with the backend's zones when it serves this file
// (`ZONES_MARKER`); served as is, the page falls back to the browser's own list.
const SERVER_ZONES = ["__MW_TIMEZONES__"];
const SHORTLIST = ["Etc/UTC", "Africa/Cairo", "Europe/Istanbul", "Africa/Nairobi", "Asia/Dubai",
  "Asia/Karachi", "Asia/Kolkata", "Asia/Bangkok", "Asia/Ho_Chi_Minh", "Asia/Shanghai",
  "Asia/Hong_Kong", "Asia/Taipei", "Asia/Singapore", "Asia/Manila", "Asia/Tokyo", "Asia/Seoul"];
export const ZONES = (function () {
  if (SERVER_ZONES[0] !== "__MW_TIMEZONES__") return SERVER_ZONES;
  const rest = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  return SHORTLIST.concat(rest.filter(function (z) { return SHORTLIST.indexOf(z) < 0; }));
})();

// The browser's own time zone when the server accepts it (a first setup proposes it), else
// null. `Intl` may name a zone by an alias the list does not hold: then it is not proposed.
export function browserZone() {
  let zone = null;
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || null; } catch (err) { zone = null; }
  return zone && ZONES.indexOf(zone) >= 0 ? zone : null;
}

function zoneLabel(zone) {
  try {
    const parts = new Intl.DateTimeFormat("en", { timeZone: zone, timeZoneName: "shortOffset" })
      .formatToParts(new Date());
    const offset = parts.find(function (p) { return p.type === "timeZoneName"; });
    return zone + (offset ? " (" + offset.value.replace("GMT", "UTC") + ")" : "");
  } catch (err) {
    return zone;
  }
}

export function renderZones(selected) {
  const select = $("f-timezone");
  const current = selected || select.value || "Asia/Shanghai";
  const needle = $("tz-filter").value.trim().toLowerCase();
  const shown = ZONES.filter(function (z) {
    return z === current || !needle || z.toLowerCase().indexOf(needle) >= 0;
  });
  if (shown.indexOf(current) < 0) shown.unshift(current);
  select.replaceChildren();
  shown.forEach(function (zone, index) {
    const option = document.createElement("option");
    option.value = zone;
    option.textContent = zoneLabel(zone);
    select.appendChild(option);
    if (index === SHORTLIST.length - 1 && !needle) {
      const sep = document.createElement("option");
      sep.disabled = true;
      sep.textContent = "──────────";
      select.appendChild(sep);
    }
  });
  select.value = current;
}

export function selectZone(zone) {
  $("tz-filter").value = "";
  renderZones(zone);
}

export function wire() {
  $("tz-filter").addEventListener("input", function () { renderZones(); });
}
