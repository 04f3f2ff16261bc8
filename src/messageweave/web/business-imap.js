// The business card's mail source (issue #33): JMAP or IMAP, each with its own fields; the
// provider presets that fill the IMAP and SMTP servers; and "Test connection"'s IMAP and SMTP
// failures in the page's words, each linked to the field to fix.
import { $, say } from "./dom.js";
import { t } from "./i18n.js";

// host, port, security of IMAP then SMTP; `note` the i18n key said under the choice.
const PRESETS = {
  gmail: { imap: ["imap.gmail.com", 993, "tls"], smtp: ["smtp.gmail.com", 465, "tls"],
    note: "preset.gmailNote" },
  outlook: { imap: ["outlook.office365.com", 993, "tls"],
    smtp: ["smtp-mail.outlook.com", 587, "starttls"], note: "preset.outlookNote" },
  icloud: { imap: ["imap.mail.me.com", 993, "tls"], smtp: ["smtp.mail.me.com", 587, "starttls"],
    note: "preset.icloudNote" },
  fastmail: { imap: ["imap.fastmail.com", 993, "tls"], smtp: ["smtp.fastmail.com", 465, "tls"],
    note: "preset.fastmailNote" },
  yahoo: { imap: ["imap.mail.yahoo.com", 993, "tls"], smtp: ["smtp.mail.yahoo.com", 465, "tls"],
    note: "preset.yahooNote" },
  dovecot: { note: "preset.dovecotNote" },  // your own server: nothing to fill in
};

// `p`: the id prefix of the form ("" for the business card's, "a-" for the accounts card's,
// which holds copies of the same inputs).
function fill(p, server, field) {
  $(p + "f-" + field + "_host").value = server[0];
  $(p + "f-" + field + "_port").value = String(server[1]);
  $(p + "f-" + field + "_security").value = server[2];
}

// The preset chosen: its servers filled in (an input event, so the form knows it changed) and
// its note said.
function applyPreset(p, form) {
  const preset = PRESETS[$(p + "imap-preset").value];
  if (!preset) {
    say(p + "preset-note", "");
    return;
  }
  if (preset.imap) fill(p, preset.imap, "imap");
  if (preset.smtp) fill(p, preset.smtp, "smtp");
  say(p + "preset-note", t(preset.note));
  $(form).dispatchEvent(new Event("input", { bubbles: true }));
}

// Only the fields of the mail source chosen are shown.
export function showSource(p) {
  const prefix = p || "";
  const imap = $(prefix + "f-mail_source").value === "imap";
  $(prefix + "imap-fields").hidden = !imap;
  $(prefix + "jmap-fields").hidden = imap;
}

export function wireSource(p, form) {
  const prefix = p || "";
  $(prefix + "f-mail_source").addEventListener("change", function () { showSource(prefix); });
  $(prefix + "imap-preset").addEventListener("change", function () {
    applyPreset(prefix, form || "biz-form");
  });
}

// Which field fixes a failed step of the `mail` or `smtp` component.
const STEP_FIELD = {
  "mail.login": "imap_password", "mail.certificate": "imap_ca_pem", "mail.tls": "imap_security",
  "mail.connect": "imap_host", "mail.timeout": "imap_host", "mail.select": "imap_notify_mailboxes",
  "smtp.login": "smtp_password", "smtp.certificate": "imap_ca_pem", "smtp.connect": "smtp_host",
};

// One line per failed step in the page's words (with the mailbox for a `select`), linked to
// its field; a step the page has no words for (`idle`, `build`) is left to the server's detail.
export function imapLines(component, errors) {
  const lines = [];
  (errors || []).forEach(function (error) {
    const key = component + "." + error.step;
    const field = STEP_FIELD[key];
    if (!field) return;
    const mailbox = /^no such mailbox: '(.*)'/.exec(error.detail || "");
    lines.push({ text: t("biz.imap." + key, { mailbox: mailbox ? mailbox[1] : "" }),
      kind: "error", field: field });
  });
  return lines;
}
