// A small line chart on a canvas: series of (time, value) points, the last few minutes,
// redrawn whenever new points come. Written for Warren's UI (no library, works offline).
"use strict";

class LineChart {
  // canvas: the element; series: [{name, color}]; windowMs: how much time the x axis shows.
  constructor(canvas, series, windowMs) {
    this.canvas = canvas;
    this.series = series.map((s) => ({ ...s, points: [] }));
    this.windowMs = windowMs || 5 * 60 * 1000;
    this.resize = () => this.draw();
    window.addEventListener("resize", this.resize);
  }

  // Adds one point per series: values[i] for series i, at time atMs.
  push(atMs, values) {
    this.series.forEach((s, i) => {
      s.points.push([atMs, values[i] || 0]);
      const from = atMs - this.windowMs;
      while (s.points.length && s.points[0][0] < from) s.points.shift();
    });
    this.draw();
  }

  // Every point drawn so far, for tests: [[series name, count]].
  counts() {
    return this.series.map((s) => [s.name, s.points.length]);
  }

  draw() {
    const canvas = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth, height = canvas.clientHeight;
    if (!width || !height) return;
    canvas.width = width * ratio;
    canvas.height = height * ratio;
    const ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    ctx.clearRect(0, 0, width, height);
    const pad = { left: 52, right: 10, top: 10, bottom: 22 };
    const plotW = width - pad.left - pad.right, plotH = height - pad.top - pad.bottom;
    const now = Math.max(Date.now(), ...this.series.flatMap((s) => s.points.map((p) => p[0])));
    const from = now - this.windowMs;
    const max = niceMax(Math.max(1, ...this.series.flatMap((s) => s.points.map((p) => p[1]))));
    const x = (t) => pad.left + ((t - from) / this.windowMs) * plotW;
    const y = (v) => pad.top + plotH - (v / max) * plotH;
    const style = getComputedStyle(document.documentElement);
    ctx.strokeStyle = style.getPropertyValue("--line");
    ctx.fillStyle = style.getPropertyValue("--muted");
    ctx.font = "11px sans-serif";
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const value = (max / 4) * i, yy = Math.round(y(value)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(pad.left, yy);
      ctx.lineTo(width - pad.right, yy);
      ctx.stroke();
      ctx.fillText(shortNumber(value), 4, yy + 4);
    }
    for (let minutes = 0; minutes <= this.windowMs / 60000; minutes++) {
      const t = now - minutes * 60000, xx = x(t);
      ctx.fillText(minutes === 0 ? "now" : `-${minutes}m`, xx - 12, height - 6);
    }
    for (const s of this.series) {
      if (s.points.length < 1) continue;
      ctx.strokeStyle = s.color;
      ctx.lineWidth = 2;
      ctx.beginPath();
      s.points.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
      ctx.stroke();
      ctx.globalAlpha = 0.12;
      ctx.fillStyle = s.color;
      ctx.lineTo(x(s.points[s.points.length - 1][0]), y(0));
      ctx.lineTo(x(s.points[0][0]), y(0));
      ctx.closePath();
      ctx.fill();
      ctx.globalAlpha = 1;
    }
  }

  destroy() {
    window.removeEventListener("resize", this.resize);
  }
}

// A round ceiling for an axis: 1, 2 or 5 times a power of ten.
function niceMax(value) {
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function shortNumber(value) {
  if (value >= 1e6) return (value / 1e6).toFixed(value >= 1e7 ? 0 : 1) + "M";
  if (value >= 1e3) return (value / 1e3).toFixed(value >= 1e4 ? 0 : 1) + "k";
  return value >= 10 || value === 0 ? Math.round(value).toString() : value.toFixed(1);
}
