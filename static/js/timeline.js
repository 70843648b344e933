// The session page's timeline: lanes of what happened on a real time axis, drawn on a canvas.
//
// It draws what it is given (the state's intervals, turns and markers, a window of time, the cursor)
// and reports what the operator does with it: drag to pan, ctrl+wheel (a trackpad's pinch) or the
// keyboard to zoom, a click to place the cursor. The page owns the window and the cursor.
import { LANE_COLORS } from "./palette.js";
import { clockOf, isSlow, timeTicks } from "./session_view.js";
import { LANES, timelineMarkers, timelineRows } from "./timeline_lanes.js";

const MARKER_COLORS = { "disconnect-bot": "--warn", ended: "--muted" };
const WAITING = ["waiting", "user waiting (turn latency)"]; // the lane of turns: user stopped -> bot started
const DRAG_PX = 4; // a press that moves less is a click

/**
 * @param {HTMLCanvasElement} canvas
 * @param {{pan: (seconds: number) => void, zoom: (factor: number, at: number) => void, pick: (at: number) => void}} on
 */
export function createTimeline(canvas, on) {
  const drawn = { layout: null }; // where the last drawing put things: x <-> time
  listen(canvas, on, drawn);
  return {
    /**
     * @param {object} state      the derived state
     * @param {{from: number, to: number}} shown the seconds to show
     * @param {{now: number | null, live: boolean, offline: boolean, cursor: number | null}} moment
     *   now: the clock (frozen while the page has lost the server); open intervals run up to it
     */
    draw(state, shown, moment) {
      drawTimeline(canvas, drawn, state, shown, moment);
    },
  };
}

/** What the operator does on the canvas, as pans, zooms and picks of a moment (`drawn.layout`: the last drawing's). */
function listen(canvas, on, drawn) {
  const timeAt = (x) => drawn.layout.from + ((x - drawn.layout.left) / drawn.layout.plot) * (drawn.layout.to - drawn.layout.from);
  const secondsPerPx = () => (drawn.layout.to - drawn.layout.from) / drawn.layout.plot;
  const xOf = (event) => event.clientX - canvas.getBoundingClientRect().left;

  let press = null; // {x, last, moved}
  canvas.addEventListener("pointerdown", (event) => {
    if (!drawn.layout || event.button !== 0) return;
    press = { x: xOf(event), last: xOf(event), moved: false };
    canvas.setPointerCapture(event.pointerId);
  });
  canvas.addEventListener("pointermove", (event) => {
    if (!press) return;
    const x = xOf(event);
    if (!press.moved && Math.abs(x - press.x) < DRAG_PX) return;
    press.moved = true;
    on.pan((press.last - x) * secondsPerPx());
    press.last = x;
  });
  canvas.addEventListener("pointerup", (event) => {
    if (press && !press.moved && xOf(event) >= drawn.layout.left) on.pick(timeAt(xOf(event)));
    press = null;
  });
  canvas.addEventListener("pointercancel", () => {
    press = null;
  });
  // A plain wheel scrolls the page; with ctrl (what a trackpad's pinch sends) it zooms about the pointer.
  canvas.addEventListener(
    "wheel",
    (event) => {
      if (!drawn.layout || !event.ctrlKey) return;
      event.preventDefault();
      on.zoom(event.deltaY > 0 ? 1.25 : 0.8, timeAt(Math.max(drawn.layout.left, xOf(event))));
    },
    { passive: false },
  );
  canvas.addEventListener("keydown", (event) => {
    const layout = drawn.layout;
    if (!layout) return;
    const middle = (layout.from + layout.to) / 2;
    const keys = {
      ArrowLeft: () => on.pan(-(layout.to - layout.from) / 5),
      ArrowRight: () => on.pan((layout.to - layout.from) / 5),
      "+": () => on.zoom(0.5, middle),
      "=": () => on.zoom(0.5, middle),
      "-": () => on.zoom(2, middle),
    };
    if (keys[event.key]) {
      event.preventDefault();
      keys[event.key]();
    }
  });
}

/** The canvas sized for the lanes, then the axis, the lanes and the lines on it; `drawn.layout`: where they went. */
function drawTimeline(canvas, drawn, state, shown, moment) {
  const css = getComputedStyle(document.documentElement);
  const color = (name) => css.getPropertyValue(name).trim() || "gray";
  const width = canvas.clientWidth || 800;
  const narrow = width < 560;
  const lanes = [...LANES, WAITING];
  const row = narrow ? 20 : 24;
  const top = 30; // two lines of marker labels
  const axis = 22;
  const height = top + lanes.length * row + axis;
  const left = narrow ? 84 : 150;
  const plot = Math.max(width - left - 8, 10);
  const { from, to } = shown;
  drawn.layout = { from, to, left, plot };
  if (canvas.style.height !== `${height}px`) canvas.style.height = `${height}px`;
  const ratio = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = `${narrow ? 11 : 12}px system-ui, sans-serif`;
  ctx.textBaseline = "middle";
  const x = (t) => left + ((t - from) / (to - from)) * plot;
  const g = { ctx, color, width, narrow, row, top, axis, left, plot, from, to, x, bottom: top + lanes.length * row };
  drawAxis(g);
  drawLanes(g, state, moment);
  drawLines(g, state, moment);
}

/** The axis: a tick and its clock every round step, and faint lines across the lanes. */
function drawAxis({ ctx, color, width, narrow, top, axis, left, plot, from, to, x, bottom }) {
  const { ticks } = timeTicks(from, to, Math.floor(plot / (narrow ? 70 : 90)));
  ctx.fillStyle = color("--muted");
  ctx.strokeStyle = color("--line");
  ctx.lineWidth = 1;
  ctx.textAlign = "center";
  for (const tick of ticks) {
    const tx = Math.round(x(tick.at)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(tx, top);
    ctx.lineTo(tx, bottom + 4);
    ctx.stroke();
    ctx.fillText(tick.label, Math.min(Math.max(tx, left + 22), width - 26), bottom + axis / 2 + 2);
  }
  ctx.textAlign = "left";
}

/** Each lane: its label and its intervals; the lane of turns: each turn's wait, the slow ones in the error colour. */
function drawLanes({ ctx, color, narrow, row, top, left, from, to, x }, state, moment) {
  // Open intervals run to now: the clock, or the moment the page lost the server.
  const openEnd = moment.now === null ? to : Math.min(to, moment.now);
  const rows = timelineRows(state, from, openEnd);
  rows.push({ lane: WAITING[0], label: WAITING[1], spans: [] });
  rows.forEach((lane, i) => {
    const y = top + i * row;
    ctx.fillStyle = color("--muted");
    ctx.fillText(narrow ? lane.label.replace(/ \(.*\)$/, "") : lane.label, 4, y + row / 2, left - 8);
    if (lane.lane === WAITING[0]) {
      // Each turn's wait, the slow ones (over the session's p95) in the error colour.
      for (const turn of state.turns || []) {
        const [a, b] = [turn.user_stopped_at, turn.bot_started_at];
        if (typeof a !== "number" || typeof b !== "number" || b < from || a > to) continue;
        ctx.fillStyle = isSlow(turn, state.latency) ? color("--err") : color("--warn");
        ctx.fillRect(x(Math.max(a, from)), y + 3, Math.max(2, x(Math.min(b, to)) - x(Math.max(a, from))), row - 6);
      }
      return;
    }
    ctx.fillStyle = color(LANE_COLORS[lane.lane]);
    for (const [a, b] of lane.spans) ctx.fillRect(x(a), y + 3, Math.max(2, x(b) - x(a)), row - 6);
  });
}

/** The markers, now (while live) and the cursor: vertical lines with a label above the lanes. */
function drawLines({ ctx, color, width, from, to, x, bottom }, state, moment) {
  // A label goes on the first of two lines where it is free, else the second.
  const labelEnds = [-Infinity, -Infinity];
  const line = (at, stroke, dash, label) => {
    const mx = Math.round(x(at)) + 0.5;
    ctx.strokeStyle = stroke;
    ctx.lineWidth = 1.5;
    ctx.setLineDash(dash);
    ctx.beginPath();
    ctx.moveTo(mx, 4);
    ctx.lineTo(mx, bottom);
    ctx.stroke();
    ctx.setLineDash([]);
    if (!label) return;
    ctx.fillStyle = stroke;
    // Right of its line, or left of it near the right edge.
    const textWidth = ctx.measureText(label).width;
    const start = mx + 3 + textWidth <= width ? mx + 3 : mx - 3 - textWidth;
    const free = labelEnds.findIndex((end) => end < start);
    const labelLine = free < 0 ? 1 : free;
    labelEnds[labelLine] = Math.max(labelEnds[labelLine], start + textWidth + 4);
    ctx.fillText(label, start, 8 + labelLine * 13);
  };
  for (const marker of timelineMarkers(state, from, to)) {
    line(marker.at, color(MARKER_COLORS[marker.kind] || "--muted"), [4, 3], marker.label);
  }
  if (moment.live && moment.now !== null && moment.now >= from && moment.now <= to) {
    line(moment.now, color(moment.offline ? "--err" : "--muted"), [2, 3], moment.offline ? `lost the server at ${clockOf(moment.now)}` : "");
  }
  if (typeof moment.cursor === "number" && moment.cursor >= from && moment.cursor <= to) {
    line(moment.cursor, color("--fg"), [], clockOf(moment.cursor, { ms: true }));
  }
}
