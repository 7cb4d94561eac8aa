// railyard's live topology view: polls /topology.json (the server renews it at most once per
// view.refresh_seconds) and draws spine > leaf > NVLink domain > node, one cell per GPU.
"use strict";
const POLL_MS = 2000;
let etag = "", doc = null, selected = null, drawnTree = "";

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

function gangsOf(node) {
  return [...new Set([...Object.keys(node.bound || {}), ...Object.keys(node.held || {})])];
}

function cells(node) {
  const out = [], off = node.blocked ? "off" : "free";
  let boundGpus = 0;
  for (const n of Object.values(node.bound || {})) boundGpus += n;
  const push = (kind, n) => { for (let i = 0; i < n; i++) out.push(`<i class="${kind}"></i>`); };
  push("bound", boundGpus);
  push("used", Math.max(node.used - boundGpus, 0));
  push("held", node.reserved);
  push(off, Math.max(node.gpus - node.used - node.reserved, 0));
  return out.join("");
}

function describe(node) {
  const lines = [`node ${node.name}: ${node.gpus} GPUs, ${node.used} used, ${node.reserved} reserved, ` +
                 `${Math.max(node.gpus - node.used - node.reserved, 0)} free` + (node.blocked ? ` (${node.blocked})` : "")];
  for (const [g, n] of Object.entries(node.bound || {})) lines.push(`  ${n} used by bound gang ${g}`);
  for (const [g, n] of Object.entries(node.held || {})) {
    lines.push((node.draining || []).includes(g)
      ? `  ${n} held for gang ${g} as they free up (it waited past the starvation bound)`
      : `  ${n} reserved for gang ${g}`);
  }
  return lines.join("\n");
}

function drawDomain(dom, depth, path) {
  const here = depth < 0 ? [] : [...path, dom.name];
  let inner;
  if (dom.nodes) {
    inner = `<div class="nodes">` + dom.nodes.map(n =>
      `<div class="node${n.blocked ? " blocked" : ""}" data-node="${esc(n.name)}" data-gangs="${esc(gangsOf(n).join(" "))}" ` +
      `title="${esc(describe(n))}">${cells(n)}</div>`).join("") + `</div>`;
  } else {
    inner = `<div class="kids">` + dom.children.map(c => drawDomain(c, depth + 1, here)).join("") + `</div>`;
  }
  if (depth < 0) return inner;
  const word = doc.levels[depth] || "";
  return `<div class="dom lvl${depth}" data-domain="${esc(here.join("/"))}"><div class="label">${esc(word)} ${esc(dom.name)}</div>${inner}</div>`;
}

function gangItem(g, list) {
  let where = "";
  if (list === "waiting") where = g.closest ? `closest: ${g.closest.level} ${g.closest.domain}` : "";
  else where = `${g.level} ${g.domain}, ${g.pods} pods on ${g.nodes.length} nodes` +
               (g.deadline_in_seconds !== null ? `, ${g.deadline_in_seconds}s left` : "");
  return `<li data-gang="${esc(g.gang)}"><b>${esc(g.gang)}</b> ${esc(g.phase)}` +
         (list === "holding" ? ` (${g.at_bind}/${g.min_member} at bind)` : "") +
         `<span class="why">${esc(where)}</span>` + (list === "waiting" ? `<span class="why">${esc(g.reason)}</span>` : "") + `</li>`;
}

function draw() {
  const t = doc.totals;
  document.getElementById("totals").textContent =
    `${t.nodes} nodes, ${t.gpus} GPUs: ${t.used} used, ${t.reserved} reserved, ${t.free} free` +
    (t.blocked ? `, ${t.blocked} ${t.blocked === 1 ? "node" : "nodes"} cordoned or not ready` : "");
  // The grid is redrawn only when a node changed: a held gang's countdown alone changes the lists.
  const tree = JSON.stringify(doc.tree);
  if (tree !== drawnTree) {
    document.getElementById("grid").innerHTML = drawDomain(doc.tree, -1, []);
    drawnTree = tree;
  }
  const lists = {waiting: [], holding: [], bound: []};
  for (const g of doc.gangs) {
    if (g.phase === "bound") lists.bound.push(g);
    else if (g.domain !== null) lists.holding.push(g);
    else lists.waiting.push(g);
  }
  for (const [id, gs] of Object.entries(lists)) {
    document.getElementById(id).innerHTML = gs.map(g => gangItem(g, id)).join("") || "<li>none</li>";
  }
  if (selected) select(selected);
}

function select(what) {
  selected = what;
  document.querySelectorAll(".hl").forEach(e => e.classList.remove("hl"));
  const detail = document.getElementById("detail");
  if (what.gang) {
    const g = doc.gangs.find(x => x.gang === what.gang);
    if (!g) { detail.textContent = `gang ${what.gang} is gone`; return; }
    document.querySelectorAll("[data-gang]").forEach(e => { if (e.dataset.gang === g.gang) e.classList.add("hl"); });
    document.querySelectorAll(".node").forEach(e => { if (e.dataset.gangs.split(" ").includes(g.gang)) e.classList.add("hl"); });
    detail.textContent = `gang ${g.gang}: ${g.phase}\n${g.reason}` +
      (g.domain !== null ? `\nspan: ${g.level} ${g.domain}: ${g.nodes.join(" ")}` : "") +
      (g.closest ? `\nclosest: ${g.closest.level} ${g.closest.domain}` : "");
  } else {
    const el = [...document.querySelectorAll(".node")].find(e => e.dataset.node === what.node);
    if (!el) { detail.textContent = `node ${what.node} is gone`; return; }
    el.classList.add("hl");
    detail.textContent = el.title;
  }
}

document.addEventListener("click", ev => {
  const gang = ev.target.closest("[data-gang]"), node = ev.target.closest(".node");
  if (gang) select({gang: gang.dataset.gang});
  else if (node) select({node: node.dataset.node});
});

async function poll() {
  try {
    const r = await fetch("topology.json", {cache: "no-cache"});
    if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
    const tag = r.headers.get("ETag") || "";
    if (tag !== etag || !doc) {
      doc = await r.json();
      etag = tag;
      const started = performance.now();
      draw();
      document.body.dataset.drawMs = (performance.now() - started).toFixed(1);
    }
    document.getElementById("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.etag = etag;
  } catch (e) {
    document.getElementById("status").textContent = `cannot update: ${e.message}`;
  }
  setTimeout(poll, POLL_MS);
}
poll();
