// "Heads": what each head does, as the analysis scores over training steps (previous-token,
// induction, entropy): a line chart per score with a line per head, and a layer x head table at a step.

import { get } from "./api.js";
import { h, message, put, stepSlider } from "./dom.js";
import { headColour, lineChart, probColours } from "./draw.js";

const ABOUT = {
  previous_token: ["previous-token score", "mean attention from each character to the one just before it (1: always looks one back)"],
  induction: ["induction score", "on a random text written twice, mean attention to the character after the earlier copy of the current one (1: copies what followed last time)"],
  entropy: ["entropy (nats)", "how spread out a head's attention is: 0 looks at one key, higher spreads over many"],
};

export function headsView(run) {
  const body = h("div", { class: "card-body" }, message("loading", "Loading the head scores…"));
  const root = h("div", { class: "view heads-view" }, body);
  body.classList.add("view");
  get("heads", { run: run.name }, { fresh: true }).then((data) => show(body, data), (e) => put(body, message("error", e.message)));
  return root;
}

function show(body, data) {
  if (!data.steps.length) {
    put(body, message("note", "This run logged no head scores. The HeadScores callback logs them " +
      "(callbacks.head_scores.every_n_steps=N); train with it on to see them here."));
    return;
  }
  const state = { index: data.steps.length - 1, hover: null };
  const steps = stepSlider(data.steps, (index) => { state.index = index; draw(); });
  const cards = h("div", { class: "scores" });
  const legend = h("div", { class: "headlegend" });

  function draw() {
    steps.show(state.index);
    put(legend, headIds(data).map(([l, hd]) => {
      const chip = h("span", { class: "chip", dataset: { head: `${l}.${hd}` } }, h("span", { class: "swatch" }), `L${l} H${hd}`);
      chip.firstChild.style.background = headColour(l, hd, data.layers, data.heads);
      chip.addEventListener("mouseenter", () => { state.hover = `${l}.${hd}`; draw(); });
      chip.addEventListener("mouseleave", () => { state.hover = null; draw(); });
      if (state.hover === `${l}.${hd}`) chip.classList.add("active");
      return chip;
    }));
    put(cards, data.scores.map((score) => scoreCard(data, score, state)));
  }

  put(body, h("div", { class: "card" }, h("div", { class: "stepbar" }, h("span", { class: "muted" }, "tables at"), steps.slider,
    steps.label),
    h("div", { class: "muted" }, "Lines: one per head, colour by head, lighter for later layers. Point at a head below to pick out its line."),
    legend), cards);
  draw();
}

function headIds(data) {
  const ids = [];
  for (let l = 0; l < data.layers; l++) for (let hd = 0; hd < data.heads; hd++) ids.push([l, hd]);
  return ids;
}

function scoreCard(data, score, state) {
  const [title, about] = ABOUT[score] || [score, ""];
  const values = data.values[score];
  const series = headIds(data).map(([l, hd]) => ({
    label: `layer ${l}, head ${hd}`, colour: headColour(l, hd, data.layers, data.heads),
    values: values.map((atStep) => atStep[l][hd]), dim: state.hover !== null && state.hover !== `${l}.${hd}`,
  }));
  const chart = lineChart({ xs: data.steps, series, yLabel: title, yMax: score === "entropy" ? null : 1,
    marker: data.steps[state.index], width: 360, height: 200 });
  const now = values[state.index];
  const top = score === "entropy" ? Math.max(...now.flat().filter(Number.isFinite), 1e-9) : 1;
  const table = h("table", { class: "grid headtable" }, h("tr", {}, h("th"),
    Array.from({ length: data.heads }, (_, hd) => h("th", {}, `head ${hd}`))));
  now.forEach((row, l) => {
    table.append(h("tr", {}, h("th", { class: "rowlabel" }, `layer ${l}`), row.map((v, hd) => {
      if (!Number.isFinite(v)) return h("td", { dataset: { head: `${l}.${hd}` }, title: "not logged at this step" }, "–");
      const cell = h("td", { dataset: { head: `${l}.${hd}`, value: v } }, v.toFixed(2));
      const { background, color } = probColours(v / top);
      cell.style.background = background;
      cell.style.color = color;
      return cell;
    })));
  });
  return h("div", { class: "card score", dataset: { score } }, h("div", { class: "card-title" }, title),
    h("div", { class: "muted about" }, about), chart,
    h("div", { class: "caption" }, `at step ${data.steps[state.index]}:`), table);
}
