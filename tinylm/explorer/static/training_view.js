// "Training": the probe text's attention at every logged step, with a step slider, so that a
// learner watches the heads form.

import { get } from "./api.js";
import { headGrid, labelledMap } from "./attention.js";
import { h, message, put, stepSlider } from "./dom.js";

export function trainingView(run) {
  const body = h("div", { class: "card-body" }, message("loading", "Loading the logged attention…"));
  const root = h("div", { class: "view training-view" }, h("div", { class: "card" },
    h("div", { class: "card-title" }, "The probe text's attention while training",
      h("span", { class: "muted" }, " · drag the slider to watch the heads form")), body));
  get("training", { run: run.name }, { fresh: true }).then((data) => show(body, data), (e) => put(body, message("error", e.message)));
  return root;
}

function show(body, data) {
  if (!data.steps.length) {
    put(body, message("note", "This run logged no attention weights. The attention maps callback logs them next to its " +
      "images (callbacks.attention_maps.every_n_steps=N); train with it on to watch the heads form."));
    return;
  }
  const last = data.steps.length - 1;
  const state = { index: last, selected: [0, 0], timer: null };
  const steps = stepSlider(data.steps, (index) => { state.index = index; draw(); });
  const play = h("button", { class: "btn" }, "▶ play");
  const grid = h("div", {});
  const large = h("div", {});
  const largeTitle = h("div", { class: "card-title" });

  function draw() {
    const step = data.steps[state.index];
    steps.show(state.index);
    const maps = data.attention[state.index];
    put(grid, headGrid(maps, { selected: state.selected, onPick: (l, hd) => { state.selected = [l, hd]; draw(); } }));
    const [layer, head] = state.selected;
    largeTitle.textContent = `Layer ${layer}, head ${head} at step ${step}`;
    put(large, labelledMap(data.tokens, data.tokens, maps[layer][head]));
  }

  function stopPlaying() {
    clearInterval(state.timer);
    state.timer = null;
    play.textContent = "▶ play";
  }

  play.addEventListener("click", () => {
    if (state.timer) return stopPlaying();
    if (state.index === last) state.index = 0;
    play.textContent = "❚❚ pause";
    state.timer = setInterval(() => {
      draw();
      if (state.index === last) stopPlaying();
      else state.index += 1;
    }, 600);
  });
  put(body, h("div", { class: "stepbar" }, play, steps.slider, steps.label),
    h("div", { class: "cols" }, h("div", {}, grid), h("div", {}, largeTitle, large)));
  draw();
}
