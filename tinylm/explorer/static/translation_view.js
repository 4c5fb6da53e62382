// "Translation": a translation run's greedy translation of your source text, and its decoder's
// cross-attention: each target character (rows) over the source characters (columns).

import { get } from "./api.js";
import { headGrid, labelledMap, linesView } from "./attention.js";
import { debounce, h, message, put, tokenBox } from "./dom.js";

const TYPING_MS = 250;

/** The view for one translation run, on the source typed for it, else the run's own example source (run.text);
 * read-only in a saved view (`app.fixedText` says why). */
export function translationView(run, app) {
  const state = { text: app.texts.get(run.name) ?? run.text ?? "", selected: [0, 0], gen: 0, answer: null };
  const input = h("textarea", { class: "textin", rows: 1, maxlength: 4096, spellcheck: "false",
    "aria-label": "source text", placeholder: "Type a source text", readonly: Boolean(app.fixedText), title: app.fixedText });
  input.value = state.text;
  const result = h("div", { class: "translation" });
  const grid = h("div", { class: "card-body" });
  const large = h("div", { class: "card-body" });
  const largeTitle = h("div", { class: "card-title" }, "One head");
  const root = h("div", { class: "view translation-view" },
    h("div", { class: "card" }, h("label", { class: "card-title" }, "Source text"), input, result),
    h("div", { class: "cols" },
      h("div", { class: "card" }, h("div", { class: "card-title" }, "Cross-attention, every layer and head",
        h("span", { class: "muted" }, " · rows: target, columns: source")), grid),
      h("div", { class: "card" }, largeTitle, large)));

  function draw() {
    const a = state.answer;
    if (!a.cross_attention) { // a decoder-only model trained on pairs: no cross-attention
      put(grid, message("note", "This model has no cross-attention: it reads the source and writes the target in one " +
        "sequence. Its self-attention is in the Your text view of a text run."));
      return put(large);
    }
    const [layer, head] = state.selected;
    put(grid, headGrid(a.cross_attention, { causal: false, axes: "rows: target, columns: source", selected: state.selected,
      onPick: (l, hd) => { state.selected = [l, hd]; draw(); } }));
    largeTitle.textContent = `Layer ${layer}, head ${head}: target → source`;
    const matrix = a.cross_attention[layer][head];
    put(large, labelledMap(a.target, a.source, matrix, { causal: false }),
      linesView(a.target, a.source, matrix, { causal: false }));
    app.firstMap();
  }

  async function load() {
    const gen = ++state.gen;
    app.texts.set(run.name, state.text);
    if (!state.text) return put(result, message("note", "Type a source text."));
    put(result, message("loading", "Translating…"));
    try {
      const answer = await get("translate", { run: run.name, text: state.text });
      if (gen !== state.gen) return;
      state.answer = answer;
      put(result, h("div", { class: "out" }, h("span", { class: "muted" }, "translation: "),
        h("span", { class: "target-text" }, [...answer.translation].map((ch) => tokenBox(ch)))));
      draw();
    } catch (e) {
      if (gen === state.gen) put(result, message("error", e.message));
    }
  }

  input.addEventListener("input", debounce(() => { state.text = input.value; load(); }, TYPING_MS));
  load();
  return root;
}
