// The admin page's entry module: translates the page, wires every card and checks the
// service status. Vanilla JS modules under a strict CSP: no inline code, no eval, no cookies,
// no storage but the admin session kept when "stay signed in" was ticked (session.js). One module per card; api.js, dom.js and i18n.js are shared.
import * as accounts from "./accounts.js";
import * as business from "./business.js";
import * as callbacks from "./callbacks.js";
import * as chats from "./chats.js";
import * as delivery from "./delivery.js";
import * as discover from "./discover.js";
import * as gapAudit from "./gap-audit.js";
import { applyI18n, lang, MESSAGES, missing } from "./i18n.js";
import * as logs from "./logs.js";
import * as rules from "./rules.js";
import * as processing from "./processing.js";
import * as session from "./session.js";
import * as status from "./status.js";
import * as trace from "./trace.js";
import * as zones from "./zones.js";

// The cards behind sign-in, in the order they load after it (the status card first: signed
// in, it also reads the switch and the queues).
// The accounts card is wired last: its form copies the business form's inputs once their help
// lines are in place. An owner's session opens the accounts card and the notification rules of
// their own account, nothing else.
const CARDS = [status.signedIn, processing, business, discover, rules, callbacks, chats, delivery,
  gapAudit, logs, trace, accounts];
session.manage(CARDS, [accounts, rules]);

// What the browser tests read: the language, the message tables, the zones and the state.
window.__mw = {
  lang: lang,
  messages: MESSAGES,
  missing: missing,
  zones: zones.ZONES,
  hasSession: session.hasSession,
  state: business.savedState,
};

document.addEventListener("DOMContentLoaded", function () {
  applyI18n();
  zones.renderZones(zones.browserZone() || "Asia/Shanghai");
  [status, session, zones].concat(CARDS).forEach(function (card) { card.wire(); });
  // Leaving the page (or putting it in the back/forward cache) forgets every secret.
  window.addEventListener("pagehide", session.clearPage);
  status.loadStatus();
});
