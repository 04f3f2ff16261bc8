// The few DOM helpers every card uses.
export const $ = function (id) { return document.getElementById(id); };

// Shows `text` in the element `id`; `kind` "error" or "ok" colours it.
export function say(id, text, kind) {
  const el = $(id);
  el.textContent = text || "";
  el.classList.toggle("error", kind === "error");
  el.classList.toggle("ok", kind === "ok");
}

// A new `tag` element with `props` set on it (`textContent`, `htmlFor`, `value`, ...).
export function el(tag, props) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  return node;
}

// A table cell showing `text`, with the class `className` when one is given.
export function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
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
