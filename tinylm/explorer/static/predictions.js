// The model's next-character predictions: the top characters at each position (with heads switched
// off, marked where they changed), the switchboard of heads, and the logit lens.

import { h, percent, tokenBox } from "./dom.js";
import { probColours } from "./draw.js";

/**
 * A table with a column per position: the context character on top, then the top-k next characters
 * with their probabilities. With `ablated` (the answer with heads off), its predictions are shown and
 * each cell whose character differs from `base` at that rank is marked, with the old one in its title.
 */
export function predictionTable(base, ablated = null) {
  const shown = ablated || base;
  const k = Math.max(...shown.top.map((col) => col.length), 0);
  const table = h("table", { class: "grid preds" });
  table.append(h("tr", {}, h("th", { class: "rowlabel" }, "after"),
    shown.tokens.map((tok, pos) => h("th", { dataset: { pos } }, tokenBox(tok)))));
  for (let rank = 0; rank < k; rank++) {
    const row = h("tr", {}, h("th", { class: "rowlabel" }, rank === 0 ? "1st" : rank === 1 ? "2nd" : rank === 2 ? "3rd" : `${rank + 1}th`));
    shown.top.forEach((col, pos) => {
      const guess = col[rank];
      if (!guess) return row.append(h("td"));
      const before = ablated ? base.top[pos][rank] : null;
      const changed = before && before.token !== guess.token;
      const cell = h("td", {
        class: changed ? "changed" : null,
        dataset: { pos, rank, token: guess.token, p: guess.p },
        title: `${JSON.stringify(guess.token)}: ${(guess.p * 100).toFixed(2)}%` +
          (before ? `\nwith every head on: ${JSON.stringify(before.token)} ${(before.p * 100).toFixed(2)}%` : ""),
      }, tokenBox(guess.token), h("span", { class: "p" }, percent(guess.p)));
      const { background, color } = probColours(guess.p);
      cell.style.background = background;
      cell.style.color = color;
      row.append(cell);
    });
    table.append(row);
  }
  return h("div", { class: "scrollx" }, table);
}

/** One line: how many positions' top-1 changed with the heads off. */
export function changeSummary(base, ablated) {
  const changed = ablated.top.filter((col, pos) => col[0]?.token !== base.top[pos][0]?.token).length;
  return h("div", { class: "summary", dataset: { changed } },
    `${ablated.ablated.length} head${ablated.ablated.length === 1 ? "" : "s"} off (${ablated.ablated.map(headName).join("; ")}): `,
    h("strong", {}, `the top character changed at ${changed} of ${ablated.top.length} positions`),
    changed ? " (marked orange; hover a cell to see what it was)" : "");
}

/** "1.3" -> "layer 1 head 3". */
const headName = (id) => id.replace(/^(\d+)\.(\d+)$/, "layer $1 head $2");

/**
 * The layer x head grid of switches: clicking a head switches it off (or on again); `off` holds
 * "layer.head" ids, as the predict route's ablate= takes them.
 */
export function switchboard(layers, heads, off, onToggle, onReset) {
  const grid = h("div", { class: "switches" });
  grid.style.gridTemplateColumns = `auto repeat(${heads}, 44px)`;
  grid.append(h("span"), ...Array.from({ length: heads }, (_, hd) => h("span", { class: "colhead" }, `head ${hd}`)));
  for (let layer = 0; layer < layers; layer++) {
    grid.append(h("span", { class: "rowhead" }, `layer ${layer}`));
    for (let head = 0; head < heads; head++) {
      const id = `${layer}.${head}`;
      const isOff = off.has(id);
      grid.append(h("button", {
        class: isOff ? "switch off" : "switch", "aria-pressed": String(isOff), dataset: { head: id },
        title: `${isOff ? "switch on" : "switch off"} layer ${layer}, head ${head}`, onclick: () => onToggle(id),
      }, isOff ? "off" : "on"));
    }
  }
  const offList = [...off].sort();
  return h("div", { class: "switchboard" }, grid,
    h("div", { class: "caption" }, offList.length ? `off: ${offList.map(headName).join("; ")} ` : "every head is on ",
      offList.length ? h("button", { class: "link", onclick: onReset }, "switch all on") : null));
}

/**
 * The logit lens: what the model would predict from each layer's output (rows), at each position
 * (columns), coloured by the probability of that top-1 character. The last layer is the model's own.
 */
export function lensTable(lens) {
  const table = h("table", { class: "grid lens" });
  table.append(h("tr", {}, h("th", { class: "rowlabel" }, "after"),
    lens.tokens.map((tok, pos) => h("th", { dataset: { pos } }, tokenBox(tok)))));
  lens.layers.forEach((row, i) => {
    const last = i === lens.layers.length - 1;
    const tr = h("tr", {}, h("th", { class: "rowlabel", title: last ? "the model's own prediction" : "" },
      `layer ${row.layer}${last ? " = output" : ""}`));
    row.top1.forEach((tok, pos) => {
      const { background, color } = probColours(row.prob[pos]);
      const cell = h("td", { dataset: { layer: row.layer, pos, token: tok, p: row.prob[pos] },
        title: `layer ${row.layer}, after position ${pos}: ${JSON.stringify(tok)} ${(row.prob[pos] * 100).toFixed(1)}%` },
      tokenBox(tok));
      cell.style.background = background;
      cell.style.color = color;
      tr.append(cell);
    });
    table.append(tr);
  });
  const key = h("span", { class: "legend" }, "0%", h("span", { class: "pbar" }), "100%",
    h("span", { class: "muted" }, " probability of the top-1 character"));
  return h("div", {}, h("div", { class: "scrollx" }, table), h("div", { class: "caption" }, key));
}
