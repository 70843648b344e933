// A WebSocket that reconnects with backoff, says when it is down, and joins frames sent in parts.
import { formatDuration } from "./format.js";

/**
 * Turns the socket's text messages into frames. A frame too big for one
 * message comes as consecutive {"type": "part", "data": "...", "last": bool}
 * messages: their data, joined, is the frame's JSON.
 * @returns {(text: string) => object | null} the frame, or null while its parts are still coming
 */
export function frameReader() {
  let parts = [];
  return (text) => {
    const frame = JSON.parse(text);
    if (frame === null || typeof frame !== "object" || frame.type !== "part") {
      parts = []; // a whole frame: parts left unfinished before it can never complete
      return frame;
    }
    parts.push(typeof frame.data === "string" ? frame.data : "");
    if (frame.last !== true) return null;
    const whole = parts.join("");
    parts = [];
    return JSON.parse(whole);
  };
}

/**
 * @param {() => string} url     path to connect to (called at each attempt)
 * @param {(frame: object, socket: WebSocket) => void} onFrame
 * @param {HTMLElement} status   element whose text says connected / disconnected
 */
export function liveSocket(url, onFrame, status) {
  let delay = 500;
  let socket = null;
  const open = () => {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const read = frameReader(); // parts never span connections
    socket = new WebSocket(`${scheme}//${location.host}${url()}`);
    socket.onopen = () => {
      delay = 500;
      status.textContent = "connected";
      status.classList.remove("down");
    };
    socket.onmessage = (message) => {
      let frame;
      try {
        frame = read(message.data);
      } catch (error) {
        console.error("unreadable frame", error); // a page that keeps a model notices the gap and asks again
        return;
      }
      if (frame !== null) onFrame(frame, socket);
    };
    socket.onclose = () => {
      const wait = delay * (0.75 + Math.random() / 2); // jittered: a restarted server is not hit by every tab at once
      status.textContent = `disconnected, retrying in ${formatDuration(wait)}…`;
      status.classList.add("down");
      setTimeout(open, wait);
      delay = Math.min(delay * 2, 10000);
    };
  };
  open();
  return { get socket() { return socket; } };
}
