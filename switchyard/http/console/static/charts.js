// SVG bar charts drawn with DOM calls (no library, no inline styles: the CSP forbids them).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function fmtNum(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e4) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toPrecision(3);
}

// Axis ticks: 0 and multiples of a round step (1, 2 or 5 x 10^k) up to or past ``max``; with
// ``integer`` (counts) the step is at least 1, so no tick is fractional.
function ticks(max, integer) {
  if (!(max > 0)) return [0, 1];
  let step = 10 ** Math.floor(Math.log10(max / 4));
  for (const m of [1, 2, 5, 10]) { if (max / (step * m) <= 4) { step *= m; break; } }
  if (integer) step = Math.max(1, Math.round(step));
  const out = [];
  for (let v = 0; v < max + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  if (out[out.length - 1] < max) out.push(Number((out[out.length - 1] + step).toPrecision(12)));
  return out;
}

// series: [{name, cls, values: [number per label]}], drawn as stacked bars per label, with a
// legend (an HTML list after the SVG) naming each series. opts: {integer, fmt (tick text)}.
function barChart(svg, labels, series, opts) {
  const {integer = false, fmt = fmtNum} = opts || {};
  const W = 480, H = 200, L = 52, B = 28, T = 10;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const totals = labels.map((_, i) => series.reduce((s, x) => s + (x.values[i] || 0), 0));
  const marks = ticks(Math.max(...totals, 0), integer);
  const max = marks[marks.length - 1];
  const plotW = W - L - 6, plotH = H - B - T;
  for (const v of marks) {
    const y = T + plotH * (1 - v / max);
    svg.append(svgEl("line", {x1: L, x2: W - 6, y1: y, y2: y, class: "grid"}));
    svg.append(svgEl("text", {x: L - 4, y: y + 4, class: "axis tick", "text-anchor": "end"}, fmt(v)));
  }
  const step = plotW / Math.max(1, labels.length);
  const barW = Math.max(1, step * 0.8);
  labels.forEach((label, i) => {
    let y = T + plotH;
    const g = svgEl("g", {class: "bar", "data-label": label, "data-total": totals[i]});
    for (const s of series) {
      const v = s.values[i] || 0;
      const h = (v / max) * plotH;
      y -= h;
      const r = svgEl("rect", {x: L + i * step + (step - barW) / 2, y, width: barW, height: Math.max(0, h),
                               class: s.cls, "data-series": s.name, "data-value": v});
      r.append(svgEl("title", {}, `${shortLabel(label)} UTC: ${s.name} ${fmt(v)}`));
      g.append(r);
    }
    svg.append(g);
  });
  const every = Math.ceil(labels.length / 6);
  labels.forEach((label, i) => {
    if (i % every) return;
    svg.append(svgEl("text", {x: L + i * step + step / 2, y: H - 8, class: "axis", "text-anchor": "middle"},
                     shortLabel(label)));
  });
  legend(svg, series);
  svg.setAttribute("data-rendered", "1");
}

function legend(svg, series) {
  let ul = svg.nextElementSibling;
  if (!ul || !ul.classList.contains("legend")) {
    ul = document.createElement("ul");
    ul.className = "legend";
    svg.after(ul);
  }
  ul.replaceChildren(...series.map(s => {
    const li = document.createElement("li");
    const sw = document.createElement("span");
    sw.className = `swatch ${s.cls}`;
    li.append(sw, document.createTextNode(s.name));
    return li;
  }));
}

function shortLabel(label) {
  // "2026-11-24T10:05:00Z" -> "10:05"; "2026-11-24" -> "11-24"
  return label.includes("T") ? label.slice(11, 16) : label.slice(5);
}

window.Charts = {barChart, fmtNum, ticks};
