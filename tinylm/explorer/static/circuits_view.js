// "Circuits": read the circuit, not only the map. Direct logit attribution of the typed text (a layer x head
// grid and the other parts, at a clicked position or summed over the text), each head's OV circuit (what
// attending to a character makes it write) and QK circuits (tokens and positions), and the Q-, K- and
// V-composition between heads of different layers. The numbers are tinylm.analysis.circuits' (the routes
// dla, circuits, ov, qk, composition).

import { get } from "./api.js";
import { debounce, h, message, put, tokenBox, visible } from "./dom.js";
import { causalSoftmax, heatmap, largest, rowArgmax, rowCentred, valueCell } from "./matrix.js";

const TYPING_MS = 250;
const MAX_POSITIONS = 64; // the positional QK pattern shown: its first positions (exact: keys after a query are masked)
const HEAD_PART = /^(cross)?L(\d+)H(\d+)$/;

export function circuitsView(run, app) {
  const translates = run.kind === "encoder-decoder"; // the text is a source; its greedy translation is attributed
  const state = { text: app.texts.get(run.name) ?? run.text ?? "", position: null, summed: false,
    head: app.head ?? [0, 0, ""], // layer, head, "" (self-attention) or "cross" (an encoder-decoder's cross-attention)
    gen: 0, dla: null, scores: null };
  const input = h("textarea", { class: "textin", rows: 2, maxlength: 4096, spellcheck: "false",
    "aria-label": "your text", placeholder: translates ? "Type a source to translate" : "Type any text", readonly: Boolean(app.fixedText), title: app.fixedText });
  input.value = state.text;
  const against = h("input", { class: "against", maxlength: 1, size: 2, spellcheck: "false", "aria-label": "against",
    readonly: Boolean(app.fixedText), title: app.fixedText ? "a saved view holds the attribution against no character"
      : "a character whose logit is subtracted: the attribution of the logit difference (empty: none)" });
  const strip = h("div", { class: "strip dla-strip" });
  const dlaBox = h("div", { class: "card-body dla" });
  const headsBox = h("div", { class: "card-body" });
  const ovBox = h("div", { class: "card-body ov" });
  const qkBox = h("div", { class: "card-body qk" });
  const compBox = h("div", { class: "card-body composition" });
  const headTitle = h("span", { class: "head-title" });
  const failed = (e) => message(e.note ? "note" : "error", e.message);

  const root = h("div", { class: "view circuits-view" },
    h("div", { class: "card" }, h("label", { class: "card-title" }, "Direct logit attribution ",
      h("span", { class: "muted" }, translates ? "· of the model's translation of the source typed: how much each part " +
        "pushes each character it writes; click a character" : "· how much each part of the model pushes the true next " +
        "character; click a character")),
    input, h("label", { class: "muted against-label" }, "against the character ", against,
      " (optional: attribute the logit difference)"), strip, dlaBox),
    h("div", { class: "cols" },
      h("div", { class: "card" }, h("div", { class: "card-title" }, "Heads",
        h("span", { class: "muted" }, " · click a head to read its circuits")), headsBox),
      h("div", { class: "card grow" }, h("div", { class: "card-title" }, "Composition",
        h("span", { class: "muted" }, " · earlier head (row) → later head (column)")), compBox)),
    h("div", { class: "cols" },
      h("div", { class: "card" }, h("div", { class: "card-title" }, "OV circuit of ", headTitle), ovBox),
      h("div", { class: "card grow" }, h("div", { class: "card-title" }, "QK circuits"), qkBox)));

  // ---- direct logit attribution
  function drawDla() {
    const data = state.dla;
    if (!data) return;
    if (!data.positions.length) {
      put(strip);
      return put(dlaBox, message("note", "Type at least two characters: each position is attributed for the next one."));
    }
    const last = data.positions.length - 1;
    const at = state.position === null || state.position > last ? last : state.position;
    const tokens = data.source ? data.tokens.map((tok, i) => (i === 0 ? "begin" : tok)) : data.tokens;
    const target = (p) => (data.source && p.position === last ? "end" : visible(p.target));
    put(strip, data.tokens.map((_, i) => tokenBox(tokens[i], { class: !state.summed && i === at ? "picked" : "",
      dataset: { pos: i }, onclick: () => { state.position = i; state.summed = false; drawDla(); } })));
    const parts = {};
    let logit = 0;
    const chosen = state.summed ? data.positions : [data.positions[at]];
    for (const p of chosen) {
      logit += p.logit;
      for (const [name, v] of Object.entries(p.parts)) parts[name] = (parts[name] ?? 0) + v;
    }
    const p = data.positions[at];
    const what = p.against !== undefined ? `logit differences (minus ${visible(p.against)}'s)` : "logits";
    const about = state.summed ? `summed over the ${data.positions.length} positions: the ${what} of each true next character add up to ${logit.toFixed(2)}`
      : `position ${at} (${visible(tokens[at])}) → target ${target(p)}: logit ${p.logit.toFixed(2)}` +
        (p.against !== undefined ? ` (minus the logit of ${visible(p.against)})` : "");
    const toggle = h("button", { class: "btn dla-mode", onclick: () => { state.summed = !state.summed; drawDla(); } },
      state.summed ? "show one position" : "sum over the text");
    const translation = data.source ? h("div", { class: "caption translation-of", dataset: { translation: data.translation } },
      `${data.source.join("")} → ${data.translation || "(nothing)"}: the model's greedy translation, read from begin, ` +
      "each position attributed for the character it writes next (the last: the end)") : null;
    put(dlaBox, translation, h("div", { class: "summary dla-about" }, about, " ", toggle), dlaTables(parts));
  }

  // One grid as the REPORT figure draws it: a row per layer (an encoder-decoder's cross-attention heads in a row
  // of their own under their layer's), its heads then its MLP; the embeddings and the biases in the last row.
  function dlaTables(parts) {
    const scale = largest(Object.values(parts));
    const rows = new Map(); // "0" or "cross0" -> { layer, kind, heads: Map(head -> value), mlp }
    const row = (layer, kind) => {
      const key = `${kind}${layer}`;
      if (!rows.has(key)) rows.set(key, { layer, kind, heads: new Map(), mlp: undefined });
      return rows.get(key);
    };
    const others = [];
    let heads = 0;
    for (const [name, v] of Object.entries(parts)) {
      const found = HEAD_PART.exec(name);
      const mlp = /^mlp(\d+)$/.exec(name);
      if (found) {
        row(Number(found[2]), found[1] || "").heads.set(Number(found[3]), v);
        heads = Math.max(heads, Number(found[3]) + 1);
      } else if (mlp) row(Number(mlp[1]), "").mlp = v;
      else others.push([name, v]);
    }
    const ordered = [...rows.values()].sort((a, b) => a.layer - b.layer || (a.kind ? 1 : 0) - (b.kind ? 1 : 0));
    const columns = Math.max(heads + 1, others.length);
    const fill = (n, make) => Array.from({ length: Math.max(n, 0) }, make);
    const blank = () => h("td", { class: "blank" }, "");
    const grid = h("table", { class: "grid dla-grid" },
      h("tr", {}, h("th"), fill(heads, (_, hd) => h("th", {}, `head ${hd}`)), h("th", {}, "MLP"),
        fill(columns - heads - 1, () => h("th"))),
      ordered.map((r) => h("tr", { dataset: { layer: r.layer, kind: r.kind || "self" } },
        h("th", { class: "rowlabel" }, `${r.kind ? "cross-attention " : ""}layer ${r.layer}`),
        fill(heads, (_, hd) => (r.heads.has(hd) ? valueCell(r.heads.get(hd), scale,
          { dataset: { part: `${r.kind}L${r.layer}H${hd}` } }) : blank())),
        r.mlp === undefined ? blank() : valueCell(r.mlp, scale, { dataset: { part: `mlp${r.layer}` } }),
        fill(columns - heads - 1, blank))),
      h("tr", { class: "dla-parts-names" }, h("th"), others.map(([name]) => h("th", { class: "part-name" }, name)),
        fill(columns - others.length, () => h("th"))),
      h("tr", { class: "dla-parts", dataset: { kind: "stream" } }, h("th", { class: "rowlabel" }, "embeddings, biases"),
        others.map(([name, v]) => valueCell(v, scale, { dataset: { part: name } })), fill(columns - others.length, blank)));
    return h("div", { class: "dla-tables" }, h("div", { class: "caption" }, "each head's output (through W_O) and " +
      "each MLP's, in its layer's row; the embeddings and the biases in the last row"), grid);
  }

  async function loadDla(gen) {
    if (!state.text) return put(dlaBox, message("note", "Type a text above."));
    if (!translates && [...state.text].length < 2) { // the route's one line, said before asking it
      put(strip);
      return put(dlaBox, message("note", "Type at least two characters: each position is attributed for the next one."));
    }
    try {
      const data = await get("dla", { run: run.name, text: state.text, against: against.value });
      if (gen !== state.gen) return;
      state.dla = data;
      drawDla();
    } catch (e) {
      if (gen === state.gen) { state.dla = null; put(strip); put(dlaBox, failed(e)); }
    }
  }

  // ---- heads, OV, QK
  function drawHeads() {
    const data = state.scores;
    const kindOf = (x) => (HEAD_PART.exec(x.name ?? "")?.[1] || "");
    const rows = [...new Set(data.heads.map((x) => `${x.layer}:${kindOf(x)}`))].map((key) => key.split(":"))
      .map(([l, kind]) => [Number(l), kind]).sort((a, b) => a[0] - b[0] || a[1].length - b[1].length);
    const heads = Math.max(...data.heads.map((x) => x.head)) + 1;
    const table = h("table", { class: "grid head-circuits" }, h("tr", {}, h("th"),
      Array.from({ length: heads }, (_, hd) => h("th", {}, `head ${hd}`))));
    for (const [l, kind] of rows) {
      table.append(h("tr", {}, h("th", { class: "rowlabel" }, `${kind ? "cross-attention " : ""}layer ${l}`),
        Array.from({ length: heads }, (_, hd) => {
          const entry = data.heads.find((x) => x.layer === l && x.head === hd && kindOf(x) === kind) || {};
          const picked = state.head[0] === l && state.head[1] === hd && (state.head[2] || "") === kind;
          const prev = entry.positional_previous_token;
          return h("td", { class: picked ? "pick picked" : "pick", dataset: { head: `${kind}${l}.${hd}` },
            onclick: () => { state.head = [l, hd, kind]; drawHeads(); loadHead(); } },
          h("div", {}, `copying ${fixed(entry.copying)}`), h("div", { class: "muted" }, `prev. token ${fixed(prev)}`));
        })));
    }
    put(headsBox, table, h("div", { class: "caption muted" }, "copying: the fraction of characters whose largest OV " +
      "output is the character itself; prev. token: the positional QK's softmax on the key one back (none with rope" +
      " and for cross-attention heads, whose keys are the source's)."),
    data.folded ? h("div", { class: "caption muted" }, `Left out: ${data.folded}`) : null);
  }

  async function loadHead() {
    const [layer, head, kind] = state.head;
    const params = { run: run.name, layer, head, kind: kind || undefined }; // self: no kind (the routes' default)
    headTitle.textContent = `${kind ? "cross-attention " : ""}layer ${layer}, head ${head}`;
    put(ovBox, message("loading", "Loading the OV circuit…"));
    put(qkBox, message("loading", "Loading the QK circuits…"));
    get("ov", params).then((data) => drawOv(data), (e) => put(ovBox, failed(e)));
    get("qk", params).then((data) => drawQk(data), (e) => put(qkBox, failed(e)));
  }

  function drawOv(data) {
    const readout = h("div", { class: "readout muted" }, "Point at a cell: attending to the row's character makes the head write the column's.");
    const marks = rowArgmax(data.ov).map((c, r) => [r, c]);
    const map = heatmap(data.ov, data.tokens, data.tokens, { marks, name: "ov", onHover: (r, c) => {
      readout.textContent = r === null ? "" : `attending to ${visible(data.tokens[r])} writes ${visible(data.tokens[c])}: ` +
        `${data.ov[r][c].toFixed(3)} (row's largest: ${visible(data.tokens[marks[r][1]])})`;
    } });
    put(ovBox, h("div", { class: "summary", dataset: { copying: data.copying } }, `copying score ${fixed(data.copying)}`,
      h("span", { class: "muted" }, " · outlined: each row's largest output; a copying head outlines the diagonal")),
    h("div", { class: "scrollx" }, map), readout);
  }

  function drawQk(data) {
    const readout = h("div", { class: "readout muted" });
    const tokens = heatmap(rowCentred(data.qk), data.tokens, data.tokens, { name: "qk", size: 380, onHover: (r, c) => {
      readout.textContent = r === null ? "" : `query ${visible(data.tokens[r])}, key ${visible(data.tokens[c])}: ${data.qk[r][c].toFixed(3)}`;
    } });
    const parts = [h("div", { class: "caption" }, "Tokens: query character (row) × key character (column), each row " +
      "centred (a softmax sees only the differences within a row)"), tokens, readout];
    if (data.positional) {
      const shown = data.positional.slice(0, MAX_POSITIONS).map((row) => row.slice(0, MAX_POSITIONS));
      const labels = shown.map((_, i) => String(i % 10));
      parts.push(h("div", { class: "caption" }, `Positions: the pattern from positions alone (softmax of each query row; ` +
        `the first ${shown.length} of ${data.positional.length}); previous-token score ${fixed(data.positional_previous_token)}`),
      heatmap(causalSoftmax(shown, 1 / Math.sqrt(data.head_size)), labels, labels, { colours: "viridis", name: "positional", size: 380 }));
    } else if (data.kind === "cross") {
      parts.push(message("note", "A cross-attention head: its queries are the target's characters (rows), its keys " +
        "the source's (columns), read through the encoder's final norm (the encoder's layers left out); no positional QK."));
    } else {
      parts.push(message("note", "No positional QK: this model's positions are not added to the residual stream " +
        "(rotary positions turn the queries and keys instead), so only the token QK applies."));
    }
    put(qkBox, ...parts);
  }

  // ---- composition
  function drawComposition(data) {
    const layerOf = (name) => Number(HEAD_PART.exec(name)?.[2] ?? -1);
    const later = data.heads.map((name, j) => [name, j]).filter(([name]) => layerOf(name) > 0);
    const earlier = data.heads.map((name, i) => [name, i]).filter(([name]) => layerOf(name) < Math.max(...data.heads.map(layerOf)));
    const scale = largest([data.q, data.k, data.v].map((m) => m.map((row) => row.map((v) => (Number.isFinite(v) ? v - data.baseline : 0)))));
    const table = (kind) => h("table", { class: "grid composition-grid", dataset: { kind } },
      h("tr", {}, h("th", {}, `${kind.toUpperCase()}-composition`), later.map(([name]) => h("th", {}, name))),
      earlier.map(([row, i]) => h("tr", {}, h("th", { class: "rowlabel" }, row), later.map(([col, j]) => {
        const v = data[kind][i][j];
        const applies = layerOf(col) > layerOf(row) && Number.isFinite(v);
        const cell = valueCell(applies ? v - data.baseline : null, scale, { dataset: { pair: `${row}>${col}` } });
        if (applies) cell.textContent = v.toFixed(2);
        return cell;
      }))));
    put(compBox, h("div", { class: "cols" }, table("q"), table("k"), table("v")),
      h("div", { class: "caption muted" }, `‖W_A W_B‖ / (‖W_A‖ ‖W_B‖) of the earlier head's OV with the later head's ` +
        `query (Q), key (K) or value (V) side; random matrices of the same shapes give about ${fixed(data.baseline)} ` +
        "(red: above that baseline, blue: below)."));
  }

  function refresh() {
    state.gen += 1;
    app.texts.set(run.name, state.text);
    loadDla(state.gen);
  }
  const typed = debounce(() => { state.text = input.value; refresh(); }, TYPING_MS);
  input.addEventListener("input", typed);
  against.addEventListener("input", () => refresh());
  refresh();
  put(headsBox, message("loading", "Loading the heads' circuits…"));
  get("circuits", { run: run.name }).then((data) => { state.scores = data; drawHeads(); loadHead(); },
    (e) => { put(headsBox, failed(e)); put(ovBox); put(qkBox); });
  put(compBox, message("loading", "Loading the composition scores…"));
  get("composition", { run: run.name }).then(drawComposition,
    (e) => put(compBox, translates ? message("note", e.message) : failed(e))); // an encoder-decoder: not its circuit
  return root;
}

function fixed(value, digits = 2) {
  return Number.isFinite(value) ? value.toFixed(digits) : "–";
}
