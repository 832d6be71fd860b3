// Preloaded (node --require) into the reference MCP servers the tests run: a server that
// listens on a port alone (express's app.listen(PORT)) listens on 127.0.0.1, not every
// interface.
"use strict";
const net = require("node:net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  if ((typeof port === "number" || typeof port === "string") && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
