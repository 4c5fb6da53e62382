// The tinylm tab: TensorBoard loads this module in an iframe and calls render(). It picks a run and
// shows one of six views of it: your text, training, heads, circuits, neurons, translation. A saved view (page.js) shows
// one of them with the same VIEWS, runInfo and newApp.

import { get } from "./api.js";
import { circuitsView } from "./circuits_view.js";
import { h, message, put } from "./dom.js";
import { headsView } from "./heads_view.js";
import { neuronsView } from "./neurons_view.js";
import { textView } from "./text_view.js";
import { trainingView } from "./training_view.js";
import { translationView } from "./translation_view.js";

export const VIEWS = [
  { id: "text", name: "Your text", build: textView, fits: (run) => run.task !== "translation" },
  { id: "training", name: "Training", build: trainingView, fits: (run) => run.kind !== "rnn" },
  { id: "heads", name: "Heads", build: headsView, fits: (run) => run.kind !== "rnn" },
  { id: "circuits", name: "Circuits", build: circuitsView, // an encoder-decoder's too: its translation, cross heads
    fits: (run) => run.kind !== "rnn" && (run.task !== "translation" || run.kind === "encoder-decoder") },
  { id: "neurons", name: "Neurons", build: neuronsView, fits: (run) => run.kind !== "rnn" && run.task !== "translation" },
  { id: "translation", name: "Translation", build: translationView, fits: (run) => run.task === "translation" },
];

/** What the views share: the texts typed per run, and the mark of the first attention map painted. */
export function newApp() {
  return {
    texts: new Map(), // run name -> the text typed for it, kept across views
    painted: false,
    firstMap() { // the first attention map is in the page: mark when it has been painted
      if (this.painted) return;
      this.painted = true;
      requestAnimationFrame(() => setTimeout(() => {
        performance.mark("tinylm-first-map");
        document.body.dataset.firstMapMs = Math.round(performance.now()); // since this frame opened
      }));
    },
  };
}

/** One line about a run's model: "decoder, 4 layers × 4 heads, best-step000300.ckpt (step 300)". */
export function runInfo(run) {
  return `${run.kind}, ${run.layers} layer${run.layers === 1 ? "" : "s"} × ${run.heads} head${run.heads === 1 ? "" : "s"}, ` +
    `${run.checkpoint} (step ${run.step})`;
}

/** The view a run opens on: its translation for a translation run, else your text. */
const home = (run) => VIEWS.find((v) => v.id === (run.task === "translation" ? "translation" : "text"));

export async function render() {
  document.head.append(h("link", { rel: "stylesheet", href: new URL("./styles.css", import.meta.url).href }));
  document.documentElement.lang = "en";
  const picker = h("select", { class: "runs", "aria-label": "run" });
  const info = h("span", { class: "runinfo muted" });
  const tabs = h("nav", { class: "tabs" });
  const main = h("main", {}, message("loading", "Loading the runs…"));
  document.body.append(h("header", {}, h("label", { class: "runlabel" }, "Run ", picker), info, tabs), main);

  const app = newApp();
  let runs;
  try {
    runs = (await get("runs", {}, { fresh: true })).runs;
  } catch (e) {
    return put(main, message("error", e.message));
  }
  if (!runs.length) {
    return put(main, message("note", "No tinylm run with a checkpoint in this logdir yet: a run appears here once it has " +
      "saved one (at its first validation). Reload the page then."));
  }
  const state = { run: runs.find((r) => r.task === "text" && r.kind !== "rnn") || runs[0], view: null };
  put(picker, runs.map((run) => h("option", { value: run.name }, run.label === "." ? "(the logdir itself)" : run.label)));
  picker.value = state.run.name;

  function show() {
    const run = state.run;
    if (!state.view || !state.view.fits(run)) state.view = home(run);
    put(info, runInfo(run));
    put(tabs, VIEWS.map((view) => h("button", {
      class: view === state.view ? "tab active" : "tab", disabled: !view.fits(run), dataset: { view: view.id },
      title: view.fits(run) ? "" : `not for this run (${run.kind}, ${run.task})`,
      onclick: () => { state.view = view; show(); },
    }, view.name)));
    put(main, state.view.build(run, app));
  }

  picker.addEventListener("change", () => {
    const before = state.run;
    state.run = runs.find((r) => r.name === picker.value);
    if (state.run.task !== before.task) state.view = home(state.run); // a translation run opens on its translation
    show();
  });
  show();
}
