// worker.js - one BullMQ Worker process of e2e.js: an empty processor that
// records submit -> start (the job's data.t against this process's wall
// clock), counts 'completed' events and when the last one came, and
// reports to e2e.js over the IPC channel.
'use strict';
const { Worker } = require('bullmq');

function arg(name, def) {
    for (const a of process.argv.slice(2)) {
        const [k, v] = a.split('=');
        if (k === name) return Number(v);
    }
    return def;
}

const port = arg('port', 0);
const concurrency = arg('concurrency', 64);
const now = () => performance.timeOrigin + performance.now(); // ms, wall clock
const lat = [];
let count = 0, failed = 0, last = 0;

const worker = new Worker('e2e', async (job) => { lat.push(now() - job.data.t); }, {
    connection: { host: '127.0.0.1', port, maxRetriesPerRequest: null },
    concurrency,
});
worker.on('completed', () => { count++; last = now(); });
worker.on('failed', () => { failed++; });
worker.on('error', (e) => process.stderr.write(`bullmq worker: ${e}\n`));

// progress for e2e.js, which waits for the N-th job to end
const tick = setInterval(() => process.send({ count, failed }), 20);
process.on('message', async (m) => {
    if (!m.stop) return;
    clearInterval(tick);
    const cpu = process.cpuUsage(); // this process's user + system, microseconds
    const cpu_us = cpu.user + cpu.system;
    process.send({ count, failed, final: { count, failed, last, lat, cpu_us } }, async () => {
        await worker.close();
        process.exit(0);
    });
});
worker.waitUntilReady().then(() => process.send({ ready: true }),
    (e) => { process.stderr.write(`bullmq worker: ${e}\n`); process.exit(1); });
