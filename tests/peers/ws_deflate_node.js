// Node `ws` with perMessageDeflate against megaconn.
//
// usage: node ws_deflate_node.js client PORT
//   connects to ws://127.0.0.1:PORT/?subscribe=room with ws's default
//   offer; prints 'negotiated <extensions>' and 'ready'; expects a push on
//   room ('push <data>'), sends a 2 KB message compressed (threshold 0) and
//   expects it echoed equal; prints 'OK'.
// usage: node ws_deflate_node.js takeover PORT PUSHES
//   ws's default offer (context kept both ways); prints 'negotiated
//   <extensions>' and 'ready', 'push <data>' for each of PUSHES pushes on
//   room, then sends one 1 KB message three times compressed (with its
//   context: the later ones refer back) and expects each echoed equal;
//   prints 'OK'.
// usage: node ws_deflate_node.js server PORT SECONDS
//   an echo server that requires client_no_context_takeover and
//   compresses everything (threshold 0); prints 'ready', and at exit
//   'compressed-in N' (messages that came with RSV1 set).
const { WebSocket, WebSocketServer } = require('ws');
const [mode, port, seconds] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4] || 30)];

if (mode === 'client') {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/?subscribe=room`, { perMessageDeflate: { threshold: 0 } });
  const body = 'node says ' + 'abc'.repeat(600) + ' end';
  let stage = 'push';
  ws.on('upgrade', (res) => console.log('negotiated ' + res.headers['sec-websocket-extensions']));
  ws.on('open', () => console.log('ready'));
  ws.on('message', (data, isBinary) => {
    const text = data.toString();
    if (stage === 'push') {
      console.log('push ' + JSON.parse(text).data);
      stage = 'echo';
      ws.send(body, { compress: true });
    } else {
      if (text !== body) { console.error('bad echo'); process.exit(1); }
      console.log('OK');
      ws.close();
    }
  });
  ws.on('error', (e) => { console.error(e.message); process.exit(1); });
  // Unreferenced: the process ends when the socket closes.
  setTimeout(() => { console.error('timeout'); process.exit(1); }, 30000).unref();
} else if (mode === 'takeover') {
  const pushes = Number(process.argv[4]);
  const ws = new WebSocket(`ws://127.0.0.1:${port}/?subscribe=room`, { perMessageDeflate: { threshold: 0 } });
  const body = 'echo me ' + Array.from({ length: 40 }, (_, i) => `quote ${i} EURUSD 1.08${String(i % 100).padStart(2, '0')}`).join(' ');
  let [got, echoes] = [0, 0];
  ws.on('upgrade', (res) => console.log('negotiated ' + res.headers['sec-websocket-extensions']));
  ws.on('open', () => console.log('ready'));
  ws.on('message', (data) => {
    const text = data.toString();
    if (got < pushes) {
      got += 1;
      console.log('push ' + JSON.parse(text).data);
      if (got === pushes) ws.send(body, { compress: true });
      return;
    }
    if (text !== body) { console.error('bad echo'); process.exit(1); }
    echoes += 1;
    if (echoes < 3) { ws.send(body, { compress: true }); return; }
    console.log('OK');
    ws.close();
  });
  ws.on('error', (e) => { console.error(e.message); process.exit(1); });
  setTimeout(() => { console.error('timeout'); process.exit(1); }, 30000).unref();
} else if (mode === 'server') {
  let compressedIn = 0;
  const wss = new WebSocketServer({
    host: '127.0.0.1', port, backlog: 4096,
    perMessageDeflate: { threshold: 0, clientNoContextTakeover: true, serverNoContextTakeover: true },
  });
  wss.on('connection', (ws, req) => {
    // ws exposes no per-message RSV1; its receiver's flag says the last frame's.
    ws.on('message', (data, isBinary) => {
      if (ws._receiver && ws._receiver._compressed) compressedIn += 1;
      ws.send(data, { binary: isBinary, compress: true });
    });
  });
  wss.on('listening', () => console.log('ready'));
  setTimeout(() => { console.log(`compressed-in ${compressedIn}`); process.exit(0); }, seconds * 1000);
} else {
  console.error('usage: node ws_deflate_node.js client PORT | takeover PORT PUSHES | server PORT SECONDS');
  process.exit(2);
}
