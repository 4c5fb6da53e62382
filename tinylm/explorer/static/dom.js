// Building the page safely: every piece of data enters the DOM as text (textContent), never as HTML.

// The SVG namespace, as the HTML parser gives it to an <svg>: no URL is written in the page (a saved view
// holds none).
const SVG_NS = (() => {
  const parsed = document.createElement("template");
  parsed.innerHTML = "<svg></svg>";
  return parsed.content.firstChild.namespaceURI;
})();

/** An HTML element: h("div", {class: "x", onclick: f}, "text", child, ...). Strings become text nodes. */
export function h(tag, attrs = {}, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element, as h() builds HTML ones. */
export function s(tag, attrs = {}, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

function fill(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace all of el's content. */
export function put(el, ...children) {
  el.replaceChildren();
  return fill(el, {}, children);
}

// Characters that would be invisible or break the layout, and what to show instead: the same symbols
// as the heatmaps in the Images tab and the projector's labels (tinylm/plots/figures.py).
const VISIBLE = { " ": "␣", "\n": "↵", "\t": "⇥", "\r": "\\r" };
// Python's str.isprintable() is false for these (the space aside, handled above).
const UNPRINTABLE = /[\p{C}\p{Zl}\p{Zp}\p{Zs}]/u;

/** A token's text as it can be seen: whitespace and control characters named, never drawn as themselves. */
export function visible(piece) {
  if (piece in VISIBLE) return VISIBLE[piece];
  const chars = [...piece];
  if (chars.length === 1) {
    return UNPRINTABLE.test(piece) ? `U+${piece.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}` : piece;
  }
  return chars.map((ch) => (ch in VISIBLE || UNPRINTABLE.test(ch) ? visible(ch) : ch)).join("");
}

/** A token as a small box; a replaced (invisible) character is styled as a symbol, with its code in the title. */
export function tokenBox(piece, extra = {}) {
  const shown = visible(piece);
  const cls = ["tok", shown !== piece ? "sym" : "", extra.class || ""].filter(Boolean).join(" ");
  const codes = [...piece].map((ch) => `U+${ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`);
  return h("span", { ...extra, class: cls, title: extra.title || `${JSON.stringify(piece)} ${codes.join(" ")}` },
    shown);
}

/** A message box in the page: kind is "error", "note" or "loading". */
export function message(kind, text) {
  return h("div", { class: `msg ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

/** A slider over a run's logged steps (starting at the last) and its "step S (i of n)" label; moving the
 * slider calls onStep(index). show(index) puts both at that step. */
export function stepSlider(steps, onStep) {
  const last = steps.length - 1;
  const slider = h("input", { type: "range", min: 0, max: last, value: last, step: 1, class: "slider", "aria-label": "step" });
  const label = h("span", { class: "steplabel" });
  slider.addEventListener("input", () => onStep(Number(slider.value)));
  function show(index) {
    slider.value = String(index);
    label.textContent = `step ${steps[index]} (${index + 1} of ${steps.length})`;
    label.dataset.step = steps[index];
  }
  return { slider, label, show };
}

/** fn called once the calls have stopped for ms milliseconds (typing). */
export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/** A percentage for a probability: 0.4213 -> "42%", 0.004 -> "0.4%". */
export function percent(p) {
  const v = p * 100;
  return v >= 9.5 ? `${Math.round(v)}%` : v >= 0.095 ? `${v.toFixed(1)}%` : "<0.1%";
}
