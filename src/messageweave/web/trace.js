// Card "Where is my mail?": an email id or subject words → `GET /api/trace?q=`, and for each
// matching mail every step the service recorded, with its time (in UTC, labelled so). The
// account chosen (issue #35) is asked for with `&account=`; one the service does not serve
// yet answers 409, said in words.
import { accountPaused, accountQuery, api, isMissingRoute, reasonOf, session } from "./api.js";
import { $, say } from "./dom.js";
import { known, queueName, t, utcTime } from "./i18n.js";

let generation = 0;

function when(iso) {
  return iso ? utcTime(iso, true) : t("trace.now");
}

function ids(list) {
  return (list || []).join(" ") || "—";
}

// The step's words: a key per step (the seen step by how it was found), filled in from it.
function stepText(s) {
  let key = "trace.step." + s.step;
  if (s.step === "seen" && s.via !== "reconcile") key += s.via === "push" ? "Push" : "Audit";
  if (s.step === "queued" && !s.read) key += "Unread";
  if (!known(key)) return s.step;
  return t(key, {
    stream: queueName(s.stream), entry: s.entry_id, outcome: s.outcome,
    failure: s.failure_class ? ", " + s.failure_class : "",
    ms: s.latency_ms, ids: ids(s.message_ids), attempts: s.attempts, dlq: s.dlq_id || "—",
    reason: s.reason ? ": " + s.reason : "", replay: s.new_entry_id, consumer: s.consumer,
    resolution: s.resolution, trigger: s.trigger, rule: s.rule || "—",
  });
}

function mailBlock(mail) {
  const block = document.createElement("div");
  block.className = "trace-mail";
  block.dataset.emailId = mail.email_id;
  block.dataset.status = mail.status;
  const head = document.createElement("h3");
  head.textContent = mail.email_id + (mail.subject ? " · " + mail.subject : "");
  const steps = document.createElement("ol");
  steps.className = "trace-steps";
  mail.steps.forEach(function (s) {
    const li = document.createElement("li");
    li.dataset.step = s.step;
    const time = document.createElement("time");
    time.textContent = when(s.at);
    li.append(time, " ", stepText(s));
    steps.appendChild(li);
  });
  block.append(head, steps);
  if (mail.reason) {
    const why = document.createElement("p");
    why.className = "msg";
    why.dataset.reason = mail.reason;
    why.textContent = known("trace.reason." + mail.reason) ? t("trace.reason." + mail.reason)
      : mail.reason;
    block.appendChild(why);
  }
  return block;
}

async function search(event) {
  event.preventDefault();
  const q = $("trace-q").value.trim();
  if (!q) return;
  const mine = ++generation;
  $("trace-results").replaceChildren();
  say("trace-msg", t("trace.searching"));
  $("trace-go").disabled = true;
  try {
    const data = await api("GET", "/api/trace?q=" + encodeURIComponent(q) +
      accountQuery("&", $("trace-account").value), undefined, true);
    if (mine !== generation) return;
    $("trace-results").replaceChildren(...data.mails.map(mailBlock));
    const notes = [];
    if (data.mails.length === 0) notes.push(t("trace.none", { q: data.query }));
    if (data.jmap !== "ok") notes.push(t("trace.jmapDown", { error: data.jmap }));
    say("trace-msg", notes.join(" "));
  } catch (err) {
    if (!session.token || mine !== generation) return;
    const failed = err.status === 409 ? accountPaused($("trace-account").value)
      : t("trace.failed", { reason: reasonOf(err) });
    say("trace-msg", isMissingRoute(err) ? t("common.notAvailable", { feature: t("trace.title") })
      : failed, "error");
  } finally {
    if (mine === generation) $("trace-go").disabled = false;
  }
}

export function load() {}

export function reset() {
  generation += 1;
  $("trace-results").replaceChildren();
  say("trace-msg", "");
  $("trace-go").disabled = false;
}

export function wire() {
  $("trace-form").addEventListener("submit", search);
}
