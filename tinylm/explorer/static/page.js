// A saved view: one of the tab's views (index.js's VIEWS) of one model, in a page with no server (a
// notebook cell, a file that opens offline). Its answers are the JSON the page holds, computed in Python
// by the routes' own functions (tinylm/explorer/standalone.py); api.js asks this page's host for them.

import { ApiError, setHost } from "./api.js";
import { h } from "./dom.js";
import { newApp, runInfo, VIEWS } from "./index.js";

/**
 * Show data.view ("text", "heads", "translation") of data.run, answering from data.answers:
 * [{route, params, answer}] (an answer {error} is the route's error). An attention answer's maps are
 * data.maps[i] for each i of its `maps` (a layer's maps the same with other heads off are held once).
 */
export function renderSaved(data) {
  setHost(savedHost(data));
  document.documentElement.lang = "en";
  const view = VIEWS.find((v) => v.id === data.view);
  const app = newApp();
  app.fixedText = data.fixed;
  app.off = data.off;
  app.head = data.head; // the head a saved circuits view opens on
  const run = data.run;
  document.body.append(
    h("header", {}, h("span", { class: "runlabel" }, `tinylm · ${view.name}`),
      h("span", { class: "runinfo muted" }, `${run.label} · ${runInfo(run)}`),
      data.about ? h("span", { class: "runinfo muted about-view" }, data.about) : null),
    h("main", {}, view.build(run, app)));
  fitFrame();
}

/** In a frame the page may reach (a notebook cell's iframe srcdoc), the frame's height follows the page's. */
function fitFrame() {
  let frame = null;
  try {
    frame = window.frameElement;
  } catch {
    return; // a frame of another origin keeps the height it was given
  }
  if (!frame) return;
  const fit = () => { frame.style.height = `${Math.ceil(document.body.getBoundingClientRect().height)}px`; };
  new ResizeObserver(fit).observe(document.body);
}

/** The params as the answers hold them: strings, without the run and without empty ones. */
function asHeld(params) {
  const held = {};
  for (const key of Object.keys(params).sort()) {
    const value = params[key];
    if (key !== "run" && value !== undefined && value !== null && value !== "") held[key] = String(value);
  }
  return JSON.stringify(held);
}

function savedHost(data) {
  const answers = new Map();
  for (const { route, params, answer } of data.answers) {
    const full = answer.maps ? { ...answer, attention: answer.maps.map((i) => data.maps[i]) } : answer;
    delete full.maps;
    answers.set(`${route} ${asHeld(params)}`, full);
  }
  return {
    get(route, params) {
      const answer = answers.get(`${route} ${asHeld(params)}`);
      if (answer === undefined) return Promise.reject(missing(data, params));
      if (typeof answer.error === "string") return Promise.reject(new ApiError(answer.error));
      return Promise.resolve(answer);
    },
  };
}

/** What a saved view says of a question it holds no answer to: a note, not an error. */
function missing(data, params) {
  if (params.layer !== undefined && data.missing_head) {
    return Object.assign(new ApiError(data.missing_head.replace("{head}", `${params.kind ?? ""}${params.layer}.${params.head}`)), { note: true });
  }
  const heads = (params.ablate || "").split(",").filter(Boolean);
  const text = heads.length && data.missing ? data.missing.replace("{ablate}", JSON.stringify(heads))
    : "This saved view holds no answer to that: open the run in the tinylm tab.";
  return Object.assign(new ApiError(text), { note: true });
}
