// neardup's try-it page: lists the collections, shows the chosen one's parameters and S-curve, and
// sends the pasted text to POST /v1/collections/{name}/query; in a collection with passages on, also to
// .../passages, and highlights the text's passages found in stored documents, with their sources. For a
// collection with a site_field, the Mirrors panel shows a site's mirrors (GET .../sites/{site}) or the
// top pairs (GET .../mirrors), as a bar chart of their shares and a table. Every value from the
// service goes into
// the page as text (textContent), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
let collections = new Map();

function headers() {
  const h = { "content-type": "application/json", "accept": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["authorization"] = "Bearer " + key;
  return h;
}

async function api(method, path, body) {
  const response = await fetch(path, {
    method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch (_) { /* empty or not JSON */ }
  if (!response.ok) {
    const message = data && data.message ? data.message : response.status + " " + response.statusText;
    throw new Error(message);
  }
  return data;
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

// P(s) = 1 - (1 - s^r)^b: the chance two documents of similarity s share at least one band.
function candidateProbability(s, bands, rows) {
  return 1 - Math.pow(1 - Math.pow(s, rows), bands);
}

// What a candidate is decided on: the collection's verification mode.
function verifiedOn(c) {
  if (c.verify === "exact") return "exact Jaccard of the shingle sets";
  return c.bins + " bins of 2 bits, or every shingle of a short document";
}

function svgElement(name, attrs, text) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function drawCurve(c) {
  const svg = $("s-curve");
  svg.replaceChildren();
  const left = 36, top = 10, width = 270, height = 170;
  const x = (s) => left + s * width;
  const y = (p) => top + (1 - p) * height;
  for (let i = 0; i <= 10; i += 2) {
    const v = i / 10;
    svg.append(svgElement("line", { class: "grid", x1: x(0), x2: x(1), y1: y(v), y2: y(v) }));
    svg.append(svgElement("text", { x: left - 6, y: y(v) + 3, "text-anchor": "end" }, v.toFixed(1)));
    svg.append(svgElement("text", { x: x(v), y: top + height + 14, "text-anchor": "middle" }, v.toFixed(1)));
  }
  svg.append(svgElement("line", { class: "axis", x1: x(0), x2: x(1), y1: y(0), y2: y(0) }));
  svg.append(svgElement("line", { class: "axis", x1: x(0), x2: x(0), y1: y(0), y2: y(1) }));
  svg.append(svgElement("text", { x: x(0.5), y: top + height + 28, "text-anchor": "middle" }, "Jaccard similarity s"));
  const points = [];
  for (let i = 0; i <= 200; i++) {
    const s = i / 200;
    points.push(x(s).toFixed(2) + "," + y(candidateProbability(s, c.bands, c.rows)).toFixed(2));
  }
  svg.append(svgElement("polyline", { class: "curve", points: points.join(" ") }));
  svg.append(svgElement("line", { class: "threshold", x1: x(c.threshold), x2: x(c.threshold), y1: y(0), y2: y(1) }));
  // The label goes on the side of the dashed line away from the curve's steep part.
  const right = c.threshold <= 0.5;
  svg.append(svgElement("text", {
    x: x(c.threshold) + (right ? 4 : -4), y: top + 10, "text-anchor": right ? "start" : "end",
  }, "t = " + c.threshold));
}

function showParams(c) {
  $("params-name").textContent = c.name;
  const list = $("params-list");
  list.replaceChildren();
  const rows = [
    ["documents", c.documents === null ? "?" : c.documents.toLocaleString()],
    ["threshold", c.threshold],
    ["signature", c.num_perm + " slots"],
    ["shingles", c.shingle + " " + c.size + "-grams"],
    ["bands x rows", c.bands + " x " + c.rows],
    ["P(t)", candidateProbability(c.threshold, c.bands, c.rows).toFixed(3)],
    ["verified on", verifiedOn(c)],
    ["passages", c.passages ? "indexed" : "off"],
  ];
  $("find-passages").hidden = !c.passages;
  for (const [k, v] of rows) {
    list.append(Object.assign(document.createElement("dt"), { textContent: k }));
    list.append(Object.assign(document.createElement("dd"), { textContent: String(v) }));
  }
  drawCurve(c);
  const sites = $("sites");
  const changed = sites.dataset.collection !== c.name;
  sites.dataset.collection = c.name;
  sites.hidden = !c.site_field;
  $("site-field").textContent = c.site_field || "";
  if (changed) {
    $("mirrors").hidden = true;
    $("mirror-chart-box").hidden = true;
    $("site-status").textContent = "";
  }
}

function cell(text, className) {
  return Object.assign(document.createElement("td"), { className, textContent: String(text) });
}

// At most this many rows in the chart (the table lists them all), and characters of a site's name
// beside a bar (the whole name is in the bar's tooltip).
const CHART_ROWS = 20, CHART_NAME = 32;

function shortName(name) {
  const chars = Array.from(name);
  return chars.length > CHART_NAME ? chars.slice(0, CHART_NAME - 1).join("") + "…" : name;
}

function percent(share) {
  return (100 * share).toFixed(1) + "%";
}

// A horizontal bar chart, a row per mirror (or pair): its two shares as two bars, each as long as the
// share. pairs: [{site, other, pages, otherPages, shared, otherShared, share, shareOfOther}]; label(p)
// names a row; legend: the two bars' meanings.
function drawShares(pairs, label, legend) {
  const svg = $("mirror-chart");
  svg.replaceChildren();
  const shown = pairs.slice(0, CHART_ROWS);
  const left = 210, width = 300, top = 18, row = 30, bar = 10;
  const height = top + shown.length * row + 4;
  svg.setAttribute("viewBox", "0 0 " + (left + width + 60) + " " + height);
  for (let i = 0; i <= 4; i++) {
    const x = left + (i / 4) * width;
    svg.append(svgElement("line", { class: i ? "grid" : "axis", x1: x, x2: x, y1: top - 4, y2: height - 2 }));
    svg.append(svgElement("text", { x, y: top - 7, "text-anchor": "middle" }, i * 25 + "%"));
  }
  shown.forEach((p, i) => {
    const y = top + i * row + 4;
    const g = svgElement("g", { class: "bar-row", "data-site": p.site, "data-other": p.other });
    const name = label(p);
    g.append(svgElement("title", {}, name)); // the whole name, where the label is cut
    g.append(svgElement("text", { class: "label", x: left - 6, y: y + bar + 3, "text-anchor": "end" }, shortName(name)));
    const bars = [
      ["share", p.share, p.shared + " of " + p.pages + " pages of " + p.site + " have a near-duplicate on " + p.other],
      ["share-of-other", p.shareOfOther,
        p.otherShared + " of " + p.otherPages + " pages of " + p.other + " have a near-duplicate on " + p.site],
    ];
    bars.forEach(([kind, share, title], j) => {
      const yb = y + j * (bar + 1);
      const rect = svgElement("rect", {
        class: "bar " + kind, x: left, y: yb, width: (share * width).toFixed(2), height: bar, "data-share": share,
      });
      rect.append(svgElement("title", {}, title + " (" + percent(share) + ")"));
      g.append(rect);
      g.append(svgElement("text", { class: "value " + kind, x: left + share * width + 4, y: yb + bar - 1 }, percent(share)));
    });
    svg.append(g);
  });
  const caption = $("mirror-legend");
  caption.replaceChildren();
  legend.forEach((text, j) => {
    caption.append(Object.assign(document.createElement("span"), { className: "key " + ["share", "share-of-other"][j] }));
    caption.append(document.createTextNode(" " + text + " "));
  });
  if (pairs.length > shown.length) {
    caption.append(document.createTextNode("The first " + shown.length + " of " + pairs.length + " are drawn; the table lists all."));
  }
  $("mirror-chart-box").hidden = shown.length === 0;
}

// rows: [site, other, pages, other pages, shared, share, share of other]
function showMirrors(rows) {
  const table = $("mirrors");
  const body = table.querySelector("tbody");
  body.replaceChildren();
  for (const r of rows) {
    const tr = document.createElement("tr");
    tr.className = "mirror";
    const classes = ["site", "other", "pages", "other-pages", "shared", "share", "share-of-other"];
    r.forEach((v, i) => tr.append(cell(typeof v === "number" && i >= 5 ? v.toFixed(3) : v, classes[i])));
    body.append(tr);
  }
  table.hidden = rows.length === 0;
}

async function onSite(event) {
  event.preventDefault();
  const name = $("collection").value;
  const site = $("site").value.trim();
  const base = "/v1/collections/" + encodeURIComponent(name);
  const status = $("site-status");
  status.className = "";
  try {
    if (site) {
      // "." and ".." would be normalized away by the URL parser: send them escaped
      const segment = site === "." || site === ".." ? site.replace(/\./g, "%2E") : encodeURIComponent(site);
      const data = await api("GET", base + "/sites/" + segment);
      showMirrors(data.mirrors.map((m) => [data.site, m.site, data.pages, m.pages, m.shared, m.share, m.share_of_other]));
      drawShares(data.mirrors.map((m) => ({
        site: data.site, other: m.site, pages: data.pages, otherPages: m.pages, shared: m.shared,
        otherShared: m.other_shared, share: m.share, shareOfOther: m.share_of_other,
      })), (p) => p.other, [
        "share: pages of " + data.site + " with a near-duplicate on that site;",
        "share of other: that site's pages with a near-duplicate on " + data.site + ".",
      ]);
      status.textContent = data.site + ": " + data.pages + " page" + (data.pages === 1 ? "" : "s") + ", " +
        data.mirrors.length + " site" + (data.mirrors.length === 1 ? "" : "s") + " sharing pages";
    } else {
      const data = await api("GET", base + "/mirrors?min_share=0.5&limit=50");
      showMirrors(data.pairs.map((p) => [p.site, p.other, p.pages, p.other_pages, p.shared, p.share, p.share_of_other]));
      drawShares(data.pairs.map((p) => ({
        site: p.site, other: p.other, pages: p.pages, otherPages: p.other_pages, shared: p.shared,
        otherShared: p.other_shared, share: p.share, shareOfOther: p.share_of_other,
      })), (p) => p.site + " ↔ " + p.other, [
        "share: pages of the first site with a near-duplicate on the second;",
        "share of other: the second site's pages with a near-duplicate on the first.",
      ]);
      status.textContent = data.pairs.length + " pair" + (data.pairs.length === 1 ? "" : "s") + " at share 0.5 or more";
    }
  } catch (error) {
    $("mirrors").hidden = true;
    $("mirror-chart-box").hidden = true;
    status.textContent = error.message;
    status.className = "error";
  }
}

async function loadCollections() {
  const select = $("collection");
  const previous = select.value || new URLSearchParams(location.search).get("collection");
  const data = await api("GET", "/v1/collections");
  collections = new Map(data.collections.map((c) => [c.name, c]));
  select.replaceChildren();
  for (const c of data.collections) {
    select.append(Object.assign(document.createElement("option"), { value: c.name, textContent: c.name }));
  }
  if (previous && collections.has(previous)) select.value = previous;
  if (select.value) showParams(collections.get(select.value));
}

async function refreshCollection(name) {
  const c = await api("GET", "/v1/collections/" + encodeURIComponent(name));
  collections.set(name, c);
  showParams(c);
}

function showMatches(matches) {
  const table = $("matches");
  const body = table.querySelector("tbody");
  body.replaceChildren();
  for (const m of matches) {
    const tr = document.createElement("tr");
    tr.className = "match";
    tr.dataset.id = m.id;
    tr.append(Object.assign(document.createElement("td"), { className: "id", textContent: m.id }));
    tr.append(Object.assign(document.createElement("td"), { className: "similarity", textContent: m.similarity.toFixed(3) }));
    tr.append(Object.assign(document.createElement("td"), {
      className: "metadata", textContent: m.metadata ? JSON.stringify(m.metadata) : "",
    }));
    body.append(tr);
  }
  table.hidden = matches.length === 0;
  $("no-matches").hidden = matches.length !== 0;
}

function plural(n, word) {
  return n.toLocaleString() + " " + word + (n === 1 ? "" : "s");
}

// "also in 19 stored documents: d1, d2, d3 and 16 more"
function alsoIn(span) {
  const named = span.also_in.slice(0, 3).map((c) => c.id).join(", ");
  const rest = span.also_in_count - Math.min(span.also_in.length, 3);
  return "also in " + plural(span.also_in_count, "stored document") + ": " + named + (rest ? " and " + rest + " more" : "");
}

// The text with each span of a source in a <mark>: the spans returned, the same ones `coverage`
// measures. Offsets are Unicode code points (Python str indexing), so the text is cut as an array of
// code points, not of UTF-16 units.
function highlight(text, sources) {
  const chars = Array.from(text);
  const spans = [];
  sources.forEach((source, i) => source.spans.forEach((span) => spans.push({ i, source, span })));
  const owner = new Array(chars.length + 1).fill(-1);
  spans.forEach((s, j) => {
    for (let k = s.span.start; k < Math.min(s.span.end, chars.length); k++) if (owner[k] < 0) owner[k] = j;
  });
  const box = $("highlighted");
  box.replaceChildren();
  let from = 0;
  for (let k = 1; k <= chars.length; k++) {
    if (k < chars.length && owner[k] === owner[from]) continue;
    const piece = chars.slice(from, k).join("");
    if (owner[from] < 0) {
      box.append(document.createTextNode(piece));
    } else {
      const s = spans[owner[from]];
      box.append(Object.assign(document.createElement("mark"), {
        className: "src-" + (s.i % 6), textContent: piece,
        title: s.source.id + (s.span.also_in_count ? "; " + alsoIn(s.span) : ""),
      }));
    }
    from = k;
  }
}

// The sentence gives `coverage`, the share inside the spans listed and highlighted; `coverage_all`
// only where `limit` left sources of further passages out.
function showPassages(text, data) {
  let sentence = "No passage of this text was found in the stored documents.";
  if (data.sources.length) {
    sentence = (100 * data.coverage).toFixed(1) + "% of the text is in passages of "
      + plural(data.sources.length, "stored document") + " (found in " + plural(data.documents, "stored document")
      + " in all).";
    if (data.more_sources) {
      sentence += " " + plural(data.more_sources, "more source") + " of further passages past the limit: with them, "
        + (100 * data.coverage_all).toFixed(1) + "% of the text.";
    }
  }
  $("coverage").textContent = sentence;
  const list = $("sources");
  list.replaceChildren();
  data.sources.forEach((source, i) => {
    const li = document.createElement("li");
    li.className = "source";
    li.dataset.id = source.id;
    li.append(Object.assign(document.createElement("span"), { className: "swatch src-" + (i % 6), textContent: source.id }));
    const spans = source.spans.map((s) => s.source_start + "-" + s.source_end).join(", ");
    li.append(document.createTextNode(" " + (100 * source.containment).toFixed(1) + "% of the text; at "
      + spans + " in the source" + (source.metadata ? " " + JSON.stringify(source.metadata) : "")));
    const copies = source.spans.filter((s) => s.also_in_count);
    if (copies.length) {
      const ul = Object.assign(document.createElement("ul"), { className: "also-in" });
      for (const s of copies) {
        ul.append(Object.assign(document.createElement("li"), {
          textContent: "text " + s.start + "-" + s.end + " " + alsoIn(s),
        }));
      }
      li.append(ul);
    }
    list.append(li);
  });
  highlight(text, data.sources);
  $("passages").hidden = false;
}

async function onPassages() {
  const name = $("collection").value;
  const text = $("text").value;
  $("find-passages").disabled = true;
  setStatus("Searching for passages…");
  const started = performance.now();
  try {
    const body = { text, limit: Number($("limit").value) || 10 };
    const data = await api("POST", "/v1/collections/" + encodeURIComponent(name) + "/passages", body);
    showPassages(text, data);
    setStatus(data.sources.length + " source" + (data.sources.length === 1 ? "" : "s") + " in "
      + Math.round(performance.now() - started) + " ms");
  } catch (error) {
    setStatus(error.message, true);
  } finally {
    $("find-passages").disabled = false;
  }
}

async function onSubmit(event) {
  event.preventDefault();
  const name = $("collection").value;
  const body = { text: $("text").value, limit: Number($("limit").value) || 10 };
  const min = $("min-similarity").value;
  if (min) body.min_similarity = Number(min);
  $("find").disabled = true;
  setStatus("Searching…");
  const started = performance.now();
  try {
    const data = await api("POST", "/v1/collections/" + encodeURIComponent(name) + "/query", body);
    showMatches(data.matches);
    const n = data.matches.length;
    setStatus(n + " match" + (n === 1 ? "" : "es") + " in " + Math.round(performance.now() - started) + " ms");
    refreshCollection(name).catch(() => {});
  } catch (error) {
    setStatus(error.message, true);
  } finally {
    $("find").disabled = false;
  }
}

function start() {
  const key = $("api-key");
  key.value = sessionStorage.getItem("neardup-api-key") || "";
  key.addEventListener("change", () => {
    sessionStorage.setItem("neardup-api-key", key.value.trim());
    loadCollections().then(() => setStatus("")).catch((e) => setStatus(e.message, true));
  });
  $("collection").addEventListener("change", (e) => {
    const c = collections.get(e.target.value);
    if (c) showParams(c);
    refreshCollection(e.target.value).catch((err) => setStatus(err.message, true));
  });
  $("query-form").addEventListener("submit", onSubmit);
  $("find-passages").addEventListener("click", onPassages);
  $("site-form").addEventListener("submit", onSite);
  loadCollections().catch((e) => setStatus("Could not list collections: " + e.message, true));
}

start();
