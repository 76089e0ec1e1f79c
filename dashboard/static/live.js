// mqdashboard's only script (the pages' Content-Security-Policy allows no other): polls
// /api/live, draws the pages' charts as SVG (the history page embeds its figures instead: drawn
// once), refreshes the live lag cells and works the "choose all" boxes. Pages work without it;
// it only keeps figures moving. A null value is a sample without a figure (a broker that was
// down): the line breaks there, and a series whose latest sample is null is labelled "down"
// instead of with its last rate.
"use strict";
(function () {
  // "Choose all" boxes (the policy allows no inline handlers): data-check-all names the
  // boxes it sets, as a selector.
  document.querySelectorAll("[data-check-all]").forEach((box) => {
    box.addEventListener("click", () => {
      document.querySelectorAll(box.dataset.checkAll).forEach((b) => { b.checked = box.checked; });
    });
  });
  const charts = document.querySelectorAll("[data-chart]");
  const lags = document.querySelectorAll("[data-live-lag]");
  const status = document.querySelector("[data-live-status]");
  if (!charts.length && !lags.length) return;
  const every = Math.max(1, parseFloat(document.body.dataset.refresh || "5")) * 1000;
  const colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
  const NS = "http://www.w3.org/2000/svg";

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const key in attrs) node.setAttribute(key, attrs[key]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function draw(figure, series) {
    // Drawn at the figure's own width, so text keeps its shape.
    const W = Math.max(240, figure.clientWidth - 16), H = 180, L = 44, B = 18;
    let svg = figure.querySelector("svg");
    if (svg) svg.remove();
    let legend = figure.querySelector(".legend");
    if (legend) legend.remove();
    svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" }, figure);
    const names = Object.keys(series);
    let t0 = Infinity, t1 = -Infinity, top = 0;
    for (const name of names) for (const [t, v] of series[name]) {
      t0 = Math.min(t0, t); t1 = Math.max(t1, t); if (v !== null) top = Math.max(top, v);
    }
    if (!names.length || t0 === Infinity) {
      el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#5b6776", "font-size": 13 }, svg).textContent = "no data yet";
      return;
    }
    top = top > 0 ? top * 1.1 : 1;
    const span = Math.max(t1 - t0, 1);
    const x = (t) => L + ((t - t0) / span) * (W - L - 6);
    const y = (v) => H - B - (v / top) * (H - B - 8);
    for (const f of [0, 0.5, 1]) {
      el("line", { x1: L, x2: W, y1: y(top * f), y2: y(top * f), stroke: "#e3e7ec" }, svg);
      el("text", { x: L - 4, y: y(top * f) + 4, "text-anchor": "end", "font-size": 10, fill: "#5b6776" }, svg).textContent =
        (top >= 10 ? Math.round(top * f) : (top * f).toFixed(1)) + "";
    }
    el("text", { x: L, y: H - 4, "font-size": 10, fill: "#5b6776" }, svg).textContent = new Date(t0 * 1000).toLocaleTimeString();
    el("text", { x: W - 4, y: H - 4, "font-size": 10, fill: "#5b6776", "text-anchor": "end" }, svg).textContent = new Date(t1 * 1000).toLocaleTimeString();
    legend = document.createElement("div");
    legend.className = "legend";
    names.forEach((name, i) => {
      const color = colors[i % colors.length];
      // One polyline per run of figures: a null (down) breaks the line.
      let run = [];
      const flush = () => {
        if (run.length) el("polyline", { points: run.join(" "), fill: "none", stroke: color, "stroke-width": 2, "vector-effect": "non-scaling-stroke" }, svg);
        run = [];
      };
      for (const [t, v] of series[name]) {
        if (v === null) flush(); else run.push(`${x(t).toFixed(1)},${y(v).toFixed(1)}`);
      }
      flush();
      const last = series[name][series[name].length - 1];
      const item = document.createElement("span");
      item.style.setProperty("--c", color);
      item.dataset.series = name;
      if (last && last[1] === null) {
        item.classList.add("down");
        item.textContent = `${name}: down`;
      } else {
        item.textContent = `${name}: ${last ? last[1] : ""} ${figure.dataset.unit || ""}`;
      }
      legend.appendChild(item);
    });
    figure.appendChild(legend);
  }

  // A page that carries its figures (a day of history) is drawn once from them, not polled.
  const embedded = document.getElementById("chart-data");
  if (embedded) {
    const data = JSON.parse(embedded.textContent);
    charts.forEach((figure) => draw(figure, data[figure.dataset.chart] || {}));
    return;
  }

  async function poll() {
    try {
      const response = await fetch("/api/live", { headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const data = await response.json();
      charts.forEach((figure) => draw(figure, data[figure.dataset.chart] || {}));
      lags.forEach((cell) => {
        const lag = data.latestLag[cell.dataset.liveLag];
        if (lag !== undefined) cell.textContent = lag === null ? "" : String(lag);
      });
      if (status) {
        status.textContent = (data.error ? `cluster: ${data.error} · ` : "") +
          `updated ${new Date(data.sampledAt * 1000).toLocaleTimeString()}, every ${data.interval} s`;
        status.classList.toggle("bad", !!data.error);
      }
    } catch (err) {
      if (status) { status.textContent = `live figures unavailable: ${err.message}`; status.classList.add("bad"); }
    }
    setTimeout(poll, every);
  }
  poll();
})();
