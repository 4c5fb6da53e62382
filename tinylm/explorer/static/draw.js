// Drawing helpers: colour scales, attention maps on a canvas, an SVG line chart.

import { h, s } from "./dom.js";

// matplotlib's viridis at 9 stops: the colour map of the attention heatmaps in the Images tab.
const VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"]
  .map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));
const MASKED = "#d9d9d9"; // the masked future: grey, as in the Images tab

/** viridis at t in [0, 1], as "rgb(...)". */
export function viridis(t) {
  const x = Math.min(Math.max(t, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const f = x - i;
  const [a, b] = [VIRIDIS[i], VIRIDIS[i + 1]];
  return `rgb(${a.map((v, k) => Math.round(v + (b[k] - v) * f)).join(",")})`;
}

/** A white-to-blue background for a probability, and a text colour readable on it. */
export function probColours(p) {
  const t = Math.min(Math.max(p, 0), 1);
  const mix = (from, to) => Math.round(from + (to - from) * t);
  return { background: `rgb(${mix(255, 21)},${mix(255, 101)},${mix(255, 192)})`, color: t > 0.55 ? "#fff" : "#212121" };
}

/**
 * An attention map [query][key] on a canvas of width x height CSS pixels: viridis from 0 to 1,
 * cells above the diagonal grey when causal (a query never sees later keys).
 */
export function mapCanvas(matrix, width, height, { causal = true } = {}) {
  const rows = matrix.length;
  const cols = rows ? matrix[0].length : 0;
  const scale = window.devicePixelRatio || 1;
  const canvas = h("canvas", { width: Math.round(width * scale), height: Math.round(height * scale), class: "map" });
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  const cw = canvas.width / Math.max(cols, 1);
  const ch = canvas.height / Math.max(rows, 1);
  for (let q = 0; q < rows; q++) {
    for (let k = 0; k < cols; k++) {
      ctx.fillStyle = causal && k > q ? MASKED : viridis(matrix[q][k]);
      // whole device pixels, overlapping by one, so that no seams show between cells
      ctx.fillRect(Math.floor(k * cw), Math.floor(q * ch), Math.ceil(cw) + 1, Math.ceil(ch) + 1);
    }
  }
  return canvas;
}

/** A horizontal colour bar for 0..1 with its ends labelled. */
export function colourBar(label = "attention weight") {
  const bar = h("span", { class: "cbar" });
  bar.style.background = `linear-gradient(to right, ${VIRIDIS.map((c) => `rgb(${c.join(",")})`).join(",")})`;
  return h("span", { class: "legend" }, "0", bar, "1", h("span", { class: "muted" }, ` ${label}`));
}

/** A colour per (layer, head): hue by head, lighter for later layers. */
export function headColour(layer, head, layers, heads) {
  const hue = Math.round((head * 360) / Math.max(heads, 1) + 20) % 360;
  const light = 28 + (layers > 1 ? (layer * 40) / (layers - 1) : 15);
  return `hsl(${hue}, 70%, ${light}%)`;
}

/**
 * An SVG line chart: xs (steps) against each series' values, a vertical marker at marker (a step).
 * series: [{label, colour, values, dim}]. Returns the <svg>.
 */
export function lineChart({ xs, series, width = 360, height = 200, yLabel = "", yMax = null, marker = null }) {
  const pad = { left: 44, right: 10, top: 10, bottom: 34 };
  const w = width - pad.left - pad.right;
  const hgt = height - pad.top - pad.bottom;
  const all = series.flatMap((one) => one.values).filter(Number.isFinite);
  const top = yMax ?? niceMax(Math.max(...all, 1e-9));
  const x0 = xs[0] ?? 0;
  const x1 = xs[xs.length - 1] ?? 1;
  const X = (x) => pad.left + (x1 === x0 ? w / 2 : ((x - x0) / (x1 - x0)) * w);
  const Y = (y) => pad.top + hgt - (y / top) * hgt;
  const svg = s("svg", { width, height, class: "chart", viewBox: `0 0 ${width} ${height}` });
  for (const t of [0, 0.5, 1]) {
    svg.append(s("line", { x1: pad.left, x2: pad.left + w, y1: Y(top * t), y2: Y(top * t), class: "grid" }),
      s("text", { x: pad.left - 6, y: Y(top * t) + 4, class: "tick", "text-anchor": "end" }, fmt(top * t)));
  }
  for (const x of [x0, x1]) svg.append(s("text", { x: X(x), y: pad.top + hgt + 14, class: "tick", "text-anchor": "middle" }, x));
  svg.append(s("text", { x: pad.left + w / 2, y: height - 4, class: "axis", "text-anchor": "middle" }, "step"),
    s("text", { x: 10, y: pad.top + hgt / 2, class: "axis", "text-anchor": "middle",
      transform: `rotate(-90 10 ${pad.top + hgt / 2})` }, yLabel));
  if (marker !== null) svg.append(s("line", { x1: X(marker), x2: X(marker), y1: pad.top, y2: pad.top + hgt, class: "marker" }));
  for (const one of series) { // a step without a value (null) breaks the line
    const runs = [[]];
    xs.forEach((x, i) => {
      if (Number.isFinite(one.values[i])) runs[runs.length - 1].push(`${X(x).toFixed(1)},${Y(one.values[i]).toFixed(1)}`);
      else if (runs[runs.length - 1].length) runs.push([]);
    });
    for (const points of runs.filter((r) => r.length)) { // a point alone (one logged step) as a dot
      const [cx, cy] = points[0].split(",");
      svg.append(points.length > 1
        ? s("polyline", { points: points.join(" "), stroke: one.colour, class: one.dim ? "series dim" : "series" },
          s("title", {}, one.label))
        : s("circle", { cx, cy, r: 3.5, style: `fill: ${one.colour}`, class: one.dim ? "series dot dim" : "series dot" },
          s("title", {}, one.label)));
    }
  }
  return svg;
}

function niceMax(v) {
  const step = 10 ** Math.floor(Math.log10(v));
  return Math.ceil(v / step) * step;
}

function fmt(v) {
  return v === 0 ? "0" : Math.abs(v) >= 10 ? v.toFixed(0) : v.toPrecision(2);
}
