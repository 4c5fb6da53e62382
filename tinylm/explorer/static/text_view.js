// "Your text": type any text; see every layer and head, one head as lines, the next characters at
// each position, the logit lens, and what switching heads off does to the predictions.

import { get } from "./api.js";
import { headGrid, linesView } from "./attention.js";
import { debounce, h, message, put, tokenBox } from "./dom.js";
import { changeSummary, lensTable, predictionTable, switchboard } from "./predictions.js";

const TOP_K = 5;
const TYPING_MS = 250;

/** The view for one run, on the text typed for it, else its own probe text (run.text, made of its vocabulary);
 * `app.firstMap()` is called once the first attention map is on the page. A saved view (page.js) sets
 * `app.fixedText` (why its text cannot change: the box is read-only) and `app.off` (the heads it opens with off). */
export function textView(run, app) {
  const state = { text: app.texts.get(run.name) ?? run.text ?? "", selected: [0, 0], off: new Set(app.off ?? []),
    query: null, gen: 0, pgen: 0 };
  const input = h("textarea", { class: "textin", rows: 2, maxlength: 4096, spellcheck: "false",
    "aria-label": "your text", placeholder: "Type any text", readonly: Boolean(app.fixedText), title: app.fixedText });
  input.value = state.text;
  const count = h("span", { class: "tokcount muted" });
  const strip = h("div", { class: "strip" });
  const attentionBox = h("div", { class: "card-body" });
  const linesBox = h("div", { class: "card-body" });
  const predsBox = h("div", { class: "card-body" });
  const switchBox = h("div", { class: "card-body" });
  const lensBox = h("div", { class: "card-body" });
  let attention = null;
  let basePredict = null;

  const root = h("div", { class: "view text-view" },
    h("div", { class: "card" }, h("label", { class: "card-title" }, "Your text ", count), input, strip),
    h("div", { class: "cols" },
      h("div", { class: "card" }, h("div", { class: "card-title" }, "Every layer and head",
        h("span", { class: "muted" }, " · click a map to show it large")), attentionBox),
      h("div", { class: "card" }, h("div", { class: "card-title lines-title" }, "One head"), linesBox)),
    h("div", { class: "cols" },
      h("div", { class: "card grow" }, h("div", { class: "card-title" }, "Next characters",
        h("span", { class: "muted" }, ` · the top ${TOP_K} after each position`)), predsBox),
      h("div", { class: "card" }, h("div", { class: "card-title" }, "Switch heads off",
        h("span", { class: "muted" }, " · click a head")), switchBox)),
    h("div", { class: "card" }, h("div", { class: "card-title" }, "Logit lens",
      h("span", { class: "muted" }, " · the top-1 next character read after each layer")), lensBox));

  function drawAttention() {
    if (!attention) return;
    const [layer, head] = state.selected;
    put(attentionBox, headGrid(attention.attention, { selected: state.selected, off: state.off,
      onPick: (l, hd) => { state.selected = [l, hd]; drawAttention(); } }));
    root.querySelector(".lines-title").textContent = `Layer ${layer}, head ${head}`;
    const focus = state.query !== null && state.query < attention.tokens.length ? state.query : null;
    put(linesBox, linesView(attention.tokens, attention.tokens, attention.attention[layer][head],
      { focus, onFocus: (q) => { state.query = q; } }));
    app.firstMap();
  }

  async function loadAttention(gen, pgen) {
    const stale = () => gen !== state.gen || pgen !== state.pgen;
    if (attention) attentionBox.classList.add("stale"); // the last text's maps, dimmed, until the new ones come
    else put(attentionBox, message("loading", "Loading attention…"));
    try {
      const answer = await get("attention", { run: run.name, text: state.text, ablate: offList() });
      if (stale()) return;
      attentionBox.classList.remove("stale");
      attention = answer;
      const [layer, head] = state.selected;
      if (layer >= answer.attention.length || head >= answer.attention[0].length) state.selected = [0, 0];
      put(count, `· ${answer.tokens.length} tokens`, answer.truncated ? ` (cut to the last ${answer.tokens.length}: the model sees ${run.block_size})` : "");
      count.dataset.count = answer.tokens.length;
      put(strip, answer.tokens.map((tok, i) => tokenBox(tok, { dataset: { pos: i, token: tok } })));
      drawAttention();
    } catch (e) {
      if (stale()) return;
      attentionBox.classList.remove("stale");
      attention = null;
      put(attentionBox, failed(e));
      put(linesBox, message("note", "No attention to show."));
    }
  }

  async function loadPredictions(gen, pgen) {
    const stale = () => gen !== state.gen || pgen !== state.pgen;
    const off = offList();
    try {
      const base = await get("predict", { run: run.name, text: state.text, k: TOP_K });
      const ablated = off ? await get("predict", { run: run.name, text: state.text, k: TOP_K, ablate: off }) : null;
      if (stale()) return;
      basePredict = base;
      put(predsBox, ablated ? changeSummary(base, ablated) : h("div", { class: "summary", dataset: { changed: 0 } },
        "Every head is on: the model's own predictions. Switch heads off to see what changes."),
      predictionTable(base, ablated));
      if (!attention) put(count, `· ${base.tokens.length} tokens`);
    } catch (e) {
      if (!stale()) put(predsBox, failed(e));
    }
  }

  async function loadLens(gen, pgen) {
    const stale = () => gen !== state.gen || pgen !== state.pgen;
    try {
      const lens = await get("lens", { run: run.name, text: state.text, ablate: offList() });
      if (stale()) return;
      lensBox.classList.remove("stale");
      put(lensBox, lensTable(lens));
    } catch (e) {
      if (!stale()) {
        lensBox.classList.remove("stale");
        put(lensBox, failed(e));
      }
    }
  }

  const failed = (e) => message(e.note ? "note" : "error", e.message); // a note: an answer a saved view lacks
  const offList = () => [...state.off].sort().join(","); // the heads switched off, as ablate= takes them

  function drawSwitches() {
    if (!run.heads) return put(switchBox, message("note", `A ${run.kind} has no attention heads to switch off.`));
    put(switchBox, switchboard(run.layers, run.heads, state.off, (id) => {
      if (state.off.has(id)) state.off.delete(id);
      else state.off.add(id);
      afterSwitch();
    }, () => { state.off.clear(); afterSwitch(); }));
  }

  function afterSwitch() {
    state.pgen += 1;
    drawSwitches();
    drawAttention();
    if (basePredict) put(predsBox, message("loading", "Predicting…"), predictionTable(basePredict));
    lensBox.classList.add("stale");
    loadAttention(state.gen, state.pgen);
    loadPredictions(state.gen, state.pgen);
    loadLens(state.gen, state.pgen);
  }

  function refresh() {
    state.gen += 1;
    app.texts.set(run.name, state.text);
    if (!state.text) {
      put(count, "");
      put(strip);
      for (const box of [attentionBox, linesBox, predsBox, lensBox]) put(box, message("note", "Type a text above."));
      return;
    }
    loadAttention(state.gen, state.pgen);
    loadPredictions(state.gen, state.pgen);
    loadLens(state.gen, state.pgen);
  }

  const typed = debounce(() => { state.text = input.value; refresh(); }, TYPING_MS);
  input.addEventListener("input", typed);
  drawSwitches();
  refresh();
  return root;
}
