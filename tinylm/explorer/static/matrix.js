// Matrices of the circuits views: a labelled heatmap on a canvas (a character per row and column), a
// diverging colour scale for signed numbers, and a table cell coloured by its value.

import { h, visible } from "./dom.js";
import { viridis } from "./draw.js";

const MASKED = "#d9d9d9";

/** Blue (negative) - white (0) - red (positive) for t in [-1, 1], with a text colour readable on it. */
export function diverging(t) {
  const x = Math.min(Math.max(Number.isFinite(t) ? t : 0, -1), 1);
  const [r, g, b] = x >= 0 ? [178, 24, 43] : [33, 102, 172];
  const a = Math.abs(x);
  const mix = (to) => Math.round(255 + (to - 255) * a);
  return { background: `rgb(${mix(r)},${mix(g)},${mix(b)})`, color: a > 0.6 ? "#fff" : "#212121" };
}

/** The largest absolute finite value of a (nested) list of numbers, at least a tiny positive number. */
export function largest(values) {
  let top = 1e-12;
  for (const v of values.flat(Infinity)) if (Number.isFinite(v) && Math.abs(v) > top) top = Math.abs(v);
  return top;
}

/** A <td> showing value (fixed digits), its background from diverging(value / scale). */
export function valueCell(value, scale, attrs = {}, digits = 2) {
  if (value === null || value === undefined || !Number.isFinite(value)) return h("td", { ...attrs, class: "blank" }, "·");
  const cell = h("td", { ...attrs, dataset: { ...(attrs.dataset || {}), value } }, value.toFixed(digits));
  const { background, color } = diverging(value / scale);
  cell.style.background = background;
  cell.style.color = color;
  return cell;
}

/**
 * A heatmap of matrix[row][col] with a character label per row (left) and column (top), drawn on one canvas.
 * colours: "diverging" (signed, scaled by the largest |value|) or "viridis" (0..1; null cells grey).
 * marks: [row, col] cells outlined (e.g. each row's largest). onHover(row, col) as the pointer moves (null off it).
 */
export function heatmap(matrix, rowLabels, colLabels, { colours = "diverging", marks = [], onHover = null,
  size = 560, name = "" } = {}) {
  const rows = matrix.length;
  const cols = rows ? matrix[0].length : 0;
  const cell = Math.max(1, Math.min(16, Math.floor(size / Math.max(rows, cols, 1))));
  const labelled = cell >= 7;
  const pad = labelled ? 16 : 2;
  const width = pad + cols * cell;
  const height = pad + rows * cell;
  const scale = window.devicePixelRatio || 1;
  const canvas = h("canvas", { width: Math.round(width * scale), height: Math.round(height * scale),
    class: "map heatmap", dataset: { rows, cols, name, cell, pad } });
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.scale(scale, scale);
  const top = colours === "diverging" ? largest(matrix) : 1;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const v = matrix[r][c];
      ctx.fillStyle = v === null ? MASKED : colours === "diverging" ? diverging(v / top).background : viridis(v);
      ctx.fillRect(pad + c * cell, pad + r * cell, cell, cell);
    }
  }
  ctx.strokeStyle = "#000";
  ctx.lineWidth = 1;
  for (const [r, c] of marks) ctx.strokeRect(pad + c * cell + 0.5, pad + r * cell + 0.5, cell - 1, cell - 1);
  if (labelled) {
    ctx.fillStyle = "#424242";
    ctx.font = `${Math.min(cell - 1, 11)}px monospace`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    colLabels.forEach((label, c) => ctx.fillText(visible(label), pad + c * cell + cell / 2, pad / 2));
    rowLabels.forEach((label, r) => ctx.fillText(visible(label), pad / 2, pad + r * cell + cell / 2));
  }
  if (onHover) {
    canvas.addEventListener("mousemove", (event) => {
      const box = canvas.getBoundingClientRect();
      const c = Math.floor((event.clientX - box.left - pad) / cell);
      const r = Math.floor((event.clientY - box.top - pad) / cell);
      onHover(r >= 0 && r < rows && c >= 0 && c < cols ? r : null, r >= 0 && r < rows && c >= 0 && c < cols ? c : null);
    });
    canvas.addEventListener("mouseleave", () => onHover(null, null));
  }
  canvas.dataset.drawn = "true";
  return canvas;
}

/** Each row minus its mean (a query's scores: a softmax sees only their differences). */
export function rowCentred(matrix) {
  return matrix.map((row) => {
    const mean = row.reduce((a, b) => a + b, 0) / Math.max(row.length, 1);
    return row.map((v) => v - mean);
  });
}

/** Each row's column of its largest value. */
export function rowArgmax(matrix) {
  return matrix.map((row) => row.reduce((best, v, c) => (v > row[best] ? c : best), 0));
}

/** Each row's softmax of its first row + 1 entries times scale (a causal attention pattern); later entries null. */
export function causalSoftmax(matrix, scale = 1) {
  return matrix.map((row, q) => {
    const seen = row.slice(0, q + 1).map((v) => v * scale);
    const top = Math.max(...seen);
    const exps = seen.map((v) => Math.exp(v - top));
    const sum = exps.reduce((a, b) => a + b, 0);
    return row.map((_, k) => (k <= q ? exps[k] / sum : null));
  });
}
