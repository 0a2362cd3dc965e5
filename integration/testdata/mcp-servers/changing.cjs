// An MCP server built on the official TypeScript SDK (McpServer, stdio)
// whose tools a test changes under toolgate. argv[2] is a JSON file:
//   {"description": "...", "upload": false}
// "search" takes its description from it, and "upload" exists while
// "upload" is true. The file is read at start and whenever it changes;
// the SDK then sends notifications/tools/list_changed.
const fs = require('fs');
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { StdioServerTransport } = require('@modelcontextprotocol/sdk/server/stdio.js');

const file = process.argv[2];
const read = () => JSON.parse(fs.readFileSync(file, 'utf8'));
const answer = (text) => async () => ({ content: [{ type: 'text', text }] });

const server = new McpServer({ name: 'docs', version: '1.0.0' });
let settings = read();
const search = server.registerTool('search', { description: settings.description }, answer('found it'));
let upload = null;
const apply = () => {
  if (settings.upload && !upload) upload = server.registerTool('upload', { description: 'Upload a file.' }, answer('uploaded'));
  if (!settings.upload && upload) { upload.remove(); upload = null; }
};
apply();

fs.watchFile(file, { interval: 100 }, () => {
  let next;
  try { next = read(); } catch { return; } // half-written: the next change
  if (next.description !== settings.description) search.update({ description: next.description });
  settings = next;
  apply();
});

server.connect(new StdioServerTransport()).catch((e) => { console.error(e); process.exit(1); });
process.stdin.on('end', () => process.exit(0));
