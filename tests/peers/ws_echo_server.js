// Node `ws` echo server for megaconn's client tests (an implementation
// nobody here wrote). usage: node ws_echo_server.js PORT SECONDS
// Echoes every message in kind; `ws` answers pings by itself. Prints
// "ready" when listening and exits after SECONDS.
const { WebSocketServer } = require('ws');
const port = Number(process.argv[2]);
const wss = new WebSocketServer({ host: '127.0.0.1', port, backlog: 4096, perMessageDeflate: false });
let open = 0;
wss.on('connection', (ws) => {
  open++;
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  ws.on('close', () => open--);
});
wss.on('listening', () => console.log('ready'));
setTimeout(() => { console.log(`open ${open}`); process.exit(0); }, Number(process.argv[3]) * 1000);
