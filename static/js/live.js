// A WebSocket that reconnects with backoff and says when it is down.

/**
 * @param {() => string} url     path to connect to (called at each attempt, so it can carry ?since=)
 * @param {(frame: object, socket: WebSocket) => void} onFrame
 * @param {HTMLElement} status   element whose text says connected / disconnected
 */
export function liveSocket(url, onFrame, status) {
  let delay = 500;
  let socket = null;
  const open = () => {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(`${scheme}//${location.host}${url()}`);
    socket.onopen = () => {
      delay = 500;
      status.textContent = "live";
      status.classList.remove("down");
    };
    socket.onmessage = (message) => onFrame(JSON.parse(message.data), socket);
    socket.onclose = () => {
      status.textContent = `disconnected, retrying in ${Math.round(delay / 1000)} s…`;
      status.classList.add("down");
      setTimeout(open, delay * (0.75 + Math.random() / 2));
      delay = Math.min(delay * 2, 10000);
    };
  };
  open();
  return { get socket() { return socket; } };
}
