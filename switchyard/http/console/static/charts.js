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
  return Number.isInteger(v) ? String(v) : v.toFixed(v < 1 ? 4 : 2);
}

// series: [{name, cls, values: [number per label]}], drawn as stacked bars per label.
function barChart(svg, labels, series) {
  const W = 480, H = 200, L = 44, B = 28, T = 10;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const totals = labels.map((_, i) => series.reduce((s, x) => s + (x.values[i] || 0), 0));
  const max = Math.max(...totals) || 1;  // spend is often far below 1: scale to the data
  const plotW = W - L - 6, plotH = H - B - T;
  for (const f of [0, 0.5, 1]) {
    const y = T + plotH * (1 - f);
    svg.append(svgEl("line", {x1: L, x2: W - 6, y1: y, y2: y, class: "grid"}));
    svg.append(svgEl("text", {x: L - 4, y: y + 4, class: "axis", "text-anchor": "end"}, fmtNum(max * f)));
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
      r.append(svgEl("title", {}, `${label}: ${s.name} ${fmtNum(v)}`));
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
  svg.setAttribute("data-rendered", "1");
}

function shortLabel(label) {
  // "2026-11-24T10:00:00Z" -> "10:00"; "2026-11-24" -> "11-24"
  return label.includes("T") ? label.slice(11, 16) : label.slice(5);
}

window.Charts = {barChart, fmtNum};
