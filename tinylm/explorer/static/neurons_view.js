// "Neurons": each MLP neuron of a layer as a cell coloured by its strongest activation on the text; click one
// to see the positions where it fires most, highlighted in their context, and the characters its output
// pushes up (through W_out and the output head). The numbers are tinylm.analysis.circuits' (route neurons).

import { get } from "./api.js";
import { debounce, h, message, put, tokenBox, visible } from "./dom.js";
import { probColours } from "./draw.js";

const TYPING_MS = 400;
const K = 5;

export function neuronsView(run, app) {
  const state = { text: app.texts.get(run.name) ?? run.text ?? "", layer: 0, neuron: null, data: null, gen: 0 };
  const input = h("textarea", { class: "textin", rows: 3, maxlength: 4096, spellcheck: "false",
    "aria-label": "your text", placeholder: "Type a text for the neurons to read", readonly: Boolean(app.fixedText),
    title: app.fixedText });
  input.value = state.text;
  const layersBar = h("div", { class: "tabs layer-tabs" });
  const gridBox = h("div", { class: "card-body neuron-grid" });
  const detailBox = h("div", { class: "card-body neuron-detail" }, message("note", "Click a neuron."));
  const failed = (e) => message(e.note ? "note" : "error", e.message);
  const root = h("div", { class: "view neurons-view" },
    h("div", { class: "card" }, h("label", { class: "card-title" }, "The text the neurons read ",
      h("span", { class: "muted" }, `· each neuron's top ${K} positions in it`)), input),
    h("div", { class: "cols" },
      h("div", { class: "card" }, h("div", { class: "card-title" }, "Neurons ",
        h("span", { class: "muted" }, "· colour: the largest activation; click one")), layersBar, gridBox),
      h("div", { class: "card grow" }, h("div", { class: "card-title neuron-title" }, "One neuron"), detailBox)));

  function layer() {
    return state.data.layers.find((x) => x.layer === state.layer) || state.data.layers[0];
  }

  function drawGrid() {
    const layers = state.data.layers;
    put(layersBar, layers.map((x) => h("button", { class: x.layer === state.layer ? "tab active" : "tab",
      dataset: { layer: x.layer }, onclick: () => { state.layer = x.layer; state.neuron = null; drawGrid(); drawDetail(); } },
    `layer ${x.layer}`)));
    const neurons = layer().neurons;
    const top = Math.max(1e-9, ...neurons.map(strongest));
    put(gridBox, h("div", { class: "neurons" }, neurons.map((n) => {
      const { background, color } = probColours(Math.max(strongest(n), 0) / top);
      const cell = h("button", { class: n.neuron === state.neuron ? "neuron picked" : "neuron",
        dataset: { neuron: n.neuron, activation: strongest(n) }, title: `neuron ${n.neuron}: ${strongest(n).toFixed(3)}`,
        onclick: () => { state.neuron = n.neuron; drawGrid(); drawDetail(); } }, String(n.neuron));
      cell.style.background = background;
      cell.style.color = color;
      return cell;
    })));
  }

  function drawDetail() {
    const n = state.neuron === null ? null : layer().neurons.find((x) => x.neuron === state.neuron);
    root.querySelector(".neuron-title").textContent = n ? `Layer ${layer().layer}, neuron ${n.neuron}` : "One neuron";
    if (!n) return put(detailBox, message("note", "Click a neuron."));
    const top = Math.max(1e-9, ...n.examples.map((e) => Math.abs(e.activation)));
    const examples = h("table", { class: "grid neuron-examples" }, h("tr", {}, h("th", {}, "activation"), h("th", {}, "context (fires on the marked character)")),
      n.examples.map((e) => h("tr", { dataset: { position: e.position } }, h("td", {}, e.activation.toFixed(3)),
        h("td", { class: "context" }, context(e, top)))));
    const most = Math.max(1e-9, ...n.pushes.map((p) => Math.abs(p.logit)));
    const pushes = h("div", { class: "pushes" }, n.pushes.map((p) => {
      const bar = h("span", { class: "pbar" });
      bar.style.width = `${Math.round(80 * Math.abs(p.logit) / most)}px`;
      return h("div", { class: "push", dataset: { char: p.char } }, tokenBox(p.char), bar, h("span", { class: "muted" }, p.logit.toFixed(3)));
    }));
    put(detailBox, h("div", { class: "caption" }, "Where it fires most"), examples,
      h("div", { class: "caption" }, "The characters its output pushes up (W_out → output head)"), pushes);
  }

  async function load(gen) {
    if (!state.text) return put(gridBox, message("note", "Type a text above."));
    put(gridBox, message("loading", "Reading the neurons…"));
    try {
      const data = await get("neurons", { run: run.name, text: state.text, k: K });
      if (gen !== state.gen) return;
      state.data = data;
      if (!data.layers.length) return put(gridBox, message("note", "This model has no MLP neurons."));
      drawGrid();
      drawDetail();
    } catch (e) {
      if (gen === state.gen) { state.data = null; put(gridBox, failed(e)); put(detailBox); }
    }
  }

  const typed = debounce(() => {
    state.text = input.value;
    state.gen += 1;
    app.texts.set(run.name, state.text);
    load(state.gen);
  }, TYPING_MS);
  input.addEventListener("input", typed);
  load(state.gen);
  return root;
}

function strongest(neuron) {
  return neuron.examples.length ? Math.max(...neuron.examples.map((e) => e.activation)) : 0;
}

/** An example's context as characters, the one the neuron fires on marked and shaded by the activation. */
function context(example, top) {
  const chars = [...example.context];
  const at = chars.length - 1; // the context ends on the character the neuron fires on
  return h("span", { class: "strip ctx" }, chars.map((ch, i) => {
    if (i !== at) return tokenBox(ch);
    const box = tokenBox(ch, { class: "fires", title: `${visible(ch)} at position ${example.position}: ${example.activation.toFixed(3)}` });
    const { background, color } = probColours(Math.max(example.activation, 0) / top);
    box.style.background = background;
    box.style.color = color;
    return box;
  }));
}
