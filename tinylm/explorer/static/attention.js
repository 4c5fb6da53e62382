// Attention pictures: every layer and head as small maps, one head as bertviz-style lines between a
// query column and a key column, and one head as a labelled map.

import { h, put, s, tokenBox, visible } from "./dom.js";
import { colourBar, mapCanvas } from "./draw.js";

/**
 * Every head of every layer as a small map, layers as rows: attention[layer][head][query][key].
 * Clicking a map calls onPick(layer, head); `selected` ([layer, head]) is outlined, heads in `off`
 * ("layer.head" strings) are marked as switched off.
 */
export function headGrid(attention, { selected = null, off = new Set(), onPick = null, causal = true, size = 0,
  axes = "rows: queries, columns: keys" } = {}) {
  const layers = attention.length;
  const heads = layers ? attention[0].length : 0;
  const side = size || Math.max(48, Math.min(110, Math.floor(420 / Math.max(heads, 1)) - 12,
    Math.floor(440 / Math.max(layers, 1)) - 24)); // a 4 x 4 grid fits beside one head at 1280 x 800
  const rows = attention[0]?.[0]?.length || 1;
  const cols = attention[0]?.[0]?.[0]?.length || 1;
  const [w, hgt] = cols >= rows ? [side, Math.max(16, Math.round((side * rows) / cols))] : [Math.round((side * cols) / rows), side];
  const grid = h("div", { class: "headgrid" });
  grid.style.gridTemplateColumns = `auto repeat(${heads}, ${Math.max(w, 40)}px)`;
  grid.append(h("span"), ...Array.from({ length: heads }, (_, hd) => h("span", { class: "colhead" }, `head ${hd}`)));
  attention.forEach((layerMaps, layer) => {
    grid.append(h("span", { class: "rowhead" }, `layer ${layer}`));
    layerMaps.forEach((matrix, head) => {
      const id = `${layer}.${head}`;
      const isSel = selected && selected[0] === layer && selected[1] === head;
      const cell = h("button", {
        class: ["mapcell", isSel ? "selected" : "", off.has(id) ? "off" : ""].filter(Boolean).join(" "),
        title: `layer ${layer}, head ${head}${off.has(id) ? " (switched off)" : ""}: click to show it large`,
        dataset: { layer, head },
        onclick: onPick ? () => onPick(layer, head) : null,
      }, mapCanvas(matrix, w, hgt, { causal }));
      if (off.has(id)) cell.append(h("span", { class: "badge" }, "off"));
      grid.append(cell);
    });
  });
  return h("div", {}, grid, h("div", { class: "caption" }, colourBar(`attention weight (${axes})`)));
}

const ROW = 22; // px per token in the lines view

/**
 * One head as lines from each query token (left) to the keys it attends to (right), opacity and
 * width by weight. Hovering a query shows only its lines, with their weights written next to the keys;
 * clicking one keeps it (focus: the query shown first; onFocus(q) hears each change). matrix[query][key]; with causal, a query has lines to itself and earlier keys only.
 */
export function linesView(queries, keys, matrix, { causal = true, title = "", focus = null, onFocus = null } = {}) {
  const width = 420;
  const top = 18; // the column names
  const height = top + Math.max(queries.length, keys.length) * ROW + 8;
  const left = 70;
  const right = width - 120;
  const svg = s("svg", { class: "lines", width, height, viewBox: `0 0 ${width} ${height}` });
  const linesLayer = s("g", {});
  const labels = s("g", { class: "weights" });
  let pinned = focus;
  const rowY = (i) => top + 4 + i * ROW + ROW / 2;

  const queryText = queries.map((tok, q) => s("text", { x: left - 8, y: rowY(q) + 5, "text-anchor": "end",
    class: `qtok${visible(tok) !== tok ? " sym" : ""}`, dataset: { query: q } }, visible(tok)));
  const keyText = keys.map((tok, k) => s("text", { x: right + 8, y: rowY(k) + 5,
    class: `ktok${visible(tok) !== tok ? " sym" : ""}`, dataset: { key: k } }, visible(tok)));
  const hit = queries.map((_, q) => s("rect", { x: 0, y: rowY(q) - ROW / 2, width: left, height: ROW, class: "hit",
    dataset: { query: q } }));

  function draw(q) {
    if (onFocus) onFocus(q);
    linesLayer.replaceChildren();
    labels.replaceChildren();
    queryText.forEach((t, i) => t.classList.toggle("active", i === q));
    keyText.forEach((t) => t.classList.remove("active"));
    const rows = q === null ? matrix.map((_, i) => i) : [q];
    for (const qi of rows) {
      matrix[qi].forEach((weight, k) => {
        if (causal && k > qi) return;
        const focused = q !== null;
        linesLayer.append(s("line", {
          x1: left, y1: rowY(qi), x2: right, y2: rowY(k), class: focused ? "att focused" : "att",
          "stroke-width": (0.5 + 5 * weight).toFixed(2), "stroke-opacity": (focused ? 0.08 + 0.92 * weight : 0.6 * weight).toFixed(3),
          dataset: { query: qi, key: k, weight },
        }));
        if (focused) {
          labels.append(s("text", { x: width - 4, y: rowY(k) + 5, "text-anchor": "end", class: weight >= 0.1 ? "w strong" : "w",
            dataset: { key: k, weight } }, weight.toFixed(2)));
          if (weight >= 0.1) keyText[k].classList.add("active");
        }
      });
    }
    caption.replaceChildren(q === null
      ? "Hover a character on the left to see what it attends to; click it to keep it."
      : `"${visible(queries[q])}" (position ${q}) attends to the keys on the right; weights sum to 1.`);
  }

  for (const el of [...hit, ...queryText]) {
    const q = Number(el.dataset.query);
    el.addEventListener("mouseenter", () => draw(q));
    el.addEventListener("click", () => { pinned = pinned === q ? null : q; draw(pinned); });
  }
  svg.addEventListener("mouseleave", () => draw(pinned));
  svg.append(s("text", { x: left - 8, y: 12, "text-anchor": "end", class: "colname" }, "query"),
    s("text", { x: right + 8, y: 12, class: "colname" }, "key"),
    s("text", { x: width - 4, y: 12, "text-anchor": "end", class: "colname" }, "weight"),
    linesLayer, ...hit, ...queryText, ...keyText, labels);
  const caption = h("div", { class: "caption" });
  draw(pinned);
  return h("div", { class: "linesview" }, title ? h("h3", {}, title) : null, svg, caption);
}

/**
 * One head as a labelled map: queries down, keys across; the cell under the mouse is named below it.
 */
export function labelledMap(queries, keys, matrix, { causal = true, cell = 0 } = {}) {
  const side = cell || Math.max(10, Math.min(28, Math.floor(380 / Math.max(keys.length, queries.length, 1))));
  const canvas = mapCanvas(matrix, side * keys.length, side * queries.length, { causal });
  const readout = h("div", { class: "caption" }, "Point at a cell to read its weight.");
  canvas.addEventListener("mousemove", (e) => {
    const k = Math.floor(e.offsetX / side);
    const q = Math.floor(e.offsetY / side);
    if (q < 0 || q >= queries.length || k < 0 || k >= keys.length) return;
    put(readout, tokenBox(queries[q]), ` (${q}) → `, tokenBox(keys[k]), ` (${k}): ${matrix[q][k].toFixed(3)}`);
  });
  const top = h("div", { class: "xlabels" }, keys.map((t) => tokenBox(t)));
  const leftLabels = h("div", { class: "ylabels" }, queries.map((t) => tokenBox(t)));
  for (const el of [...top.children, ...leftLabels.children]) {
    el.style.width = el.style.height = `${side}px`;
  }
  top.style.marginLeft = "var(--label-w)";
  return h("div", { class: "lmap" }, top, h("div", { class: "lrow" }, leftLabels, canvas), readout);
}
