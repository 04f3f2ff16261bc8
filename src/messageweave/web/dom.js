// The few DOM helpers every card uses.
export const $ = function (id) { return document.getElementById(id); };

// Shows `text` in the element `id`; `kind` "error" or "ok" colours it.
export function say(id, text, kind) {
  const el = $(id);
  el.textContent = text || "";
  el.classList.toggle("error", kind === "error");
  el.classList.toggle("ok", kind === "ok");
}

export function fillList(id, lines) {
  const list = $(id);
  list.replaceChildren();
  lines.forEach(function (line) {
    const li = document.createElement("li");
    li.textContent = line;
    list.appendChild(li);
  });
}
