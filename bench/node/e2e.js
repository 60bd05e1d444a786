// e2e.js - the BullMQ peer of bench/ax_redis_e2e.c (bench/README.md).
//
//   node e2e.js port=P tasks=N [workers=2] [concurrency=64] [batch=1000] [rate=R]
//
// One producer process (this one) and `workers` Worker processes
// (worker.js, forked first), against the redis-server on 127.0.0.1:P.
// Each Worker runs an empty processor with `concurrency` jobs at once (ax:
// the consumer's slots). The producer waits until every Worker is ready,
// then adds the N jobs with Queue.addBulk, `batch` per call, one call at a
// time; removeOnComplete, as ax deletes an acknowledged entry.
//
// Measured, by the wall clock every process shares (performance.timeOrigin
// + performance.now(), microseconds):
//   tasks/s  N / (last 'completed' event - first addBulk call); a Worker
//            emits 'completed' once the job is moved to completed (its ack)
//   submit -> start, p50 / p99: the producer writes the time it calls
//            addBulk into each job's data (t); the processor subtracts it
//            from its own start time.
// With rate=R (jobs/s) the producer paces itself, as ax_redis_e2e's does:
// a batch of R/100 jobs (at least 1) every 10 ms; only the latencies are
// printed then (bullmq_e2e_paced_p50_us, _p99_us).
//
// Every job must complete exactly once, else exit 1 with no figure.
//
// consumer CPU per task: the Worker processes' user + system time
// (process.cpuUsage() when told to stop, before closing) over N.
//
// Prints bullmq_e2e_tasks_per_s, bullmq_e2e_p50_us, bullmq_e2e_p99_us,
// bullmq_e2e_cpu_us_per_task.
'use strict';
const { fork } = require('node:child_process');
const path = require('node:path');
const { Queue } = require('bullmq');

function arg(name, def) {
    for (const a of process.argv.slice(2)) {
        const [k, v] = a.split('=');
        if (k === name) return Number(v);
    }
    return def;
}

const port = arg('port', 0);
const tasks = arg('tasks', 100000);
const nworkers = arg('workers', 2);
const concurrency = arg('concurrency', 64);
const rate = arg('rate', 0);
const batch = rate ? Math.max(1, Math.floor(rate / 100)) : arg('batch', 1000);
const now = () => performance.timeOrigin + performance.now(); // ms, wall clock

function fail(msg) {
    process.stderr.write(`bullmq e2e: ${msg}\n`);
    process.exit(1);
}

function percentile(sorted, p) {
    let k = Math.ceil((p / 100) * sorted.length);
    k = Math.min(Math.max(k, 1), sorted.length);
    return sorted[k - 1];
}

async function main() {
    if (!port || !tasks) fail('usage: node e2e.js port=P tasks=N [workers=2] [concurrency=64] [batch=1000]');
    const workers = [];
    const state = [];
    for (let i = 0; i < nworkers; i++) {
        const w = fork(path.join(__dirname, 'worker.js'),
                       [`port=${port}`, `concurrency=${concurrency}`], { stdio: 'inherit' });
        state.push({ ready: false, count: 0, failed: 0, final: null });
        w.on('message', (m) => Object.assign(state[i], m));
        w.on('exit', (code) => { if (code !== 0 && !state[i].final) fail(`worker ${i} exited ${code}`); });
        workers.push(w);
    }
    const give_up = Date.now() + 30000;
    while (!state.every((s) => s.ready)) {
        if (Date.now() > give_up) fail('the workers were not ready within 30 s');
        await new Promise((r) => setTimeout(r, 5));
    }

    const queue = new Queue('e2e', { connection: { host: '127.0.0.1', port } });
    await queue.waitUntilReady();
    const opts = { removeOnComplete: true, removeOnFail: false };
    const t0 = now();
    let next = now();
    for (let sent = 0; sent < tasks;) {
        const n = Math.min(batch, tasks - sent);
        if (rate) { // paced: this batch's turn
            const wait = next - now();
            if (wait > 0) await new Promise((r) => setTimeout(r, wait));
            next += (n * 1000) / rate;
        }
        const t = now();
        const jobs = new Array(n);
        for (let i = 0; i < n; i++) jobs[i] = { name: 'e2e', data: { t }, opts };
        await queue.addBulk(jobs);
        sent += n;
    }
    const t_sent = now(); // the last batch is in its stream

    const end_by = Date.now() + 300000;
    for (;;) {
        const done = state.reduce((a, s) => a + s.count + s.failed, 0);
        if (done >= tasks) break;
        if (Date.now() > end_by) fail(`${done} of ${tasks} jobs ended after 300 s`);
        await new Promise((r) => setTimeout(r, 5));
    }
    for (const w of workers) w.send({ stop: true });
    while (!state.every((s) => s.final)) await new Promise((r) => setTimeout(r, 5));
    await queue.close();

    let count = 0, failed = 0, last = 0, cpu_us = 0;
    const lat = [];
    for (const s of state) {
        count += s.final.count;
        failed += s.final.failed;
        last = Math.max(last, s.final.last);
        cpu_us += s.final.cpu_us;
        for (const v of s.final.lat) lat.push(v);
    }
    if (count !== tasks || failed || lat.length !== tasks)
        fail(`${count} of ${tasks} completed, ${failed} failed, ${lat.length} processor runs`);
    lat.sort((a, b) => a - b);
    const secs = (last - t0) / 1000;
    const key = rate ? 'bullmq_e2e_paced' : 'bullmq_e2e';
    if (!rate) console.log(`${key}_tasks_per_s ${(tasks / secs).toFixed(0)}`);
    console.log(`${key}_p50_us ${(percentile(lat, 50) * 1000).toFixed(1)}`);
    console.log(`${key}_p99_us ${(percentile(lat, 99) * 1000).toFixed(1)}`);
    console.log(`${key}_cpu_us_per_task ${(cpu_us / tasks).toFixed(2)}`);
    if (!rate) console.log(`${key}_submit_per_s ${(tasks * 1000 / (t_sent - t0)).toFixed(0)}`);
    process.stderr.write(`bullmq e2e: ${tasks} jobs in ${secs.toFixed(3)} s, submitted in ${((t_sent - t0) / 1000).toFixed(3)} s\n`);
    process.exit(0);
}

main().catch((e) => fail(e.stack || String(e)));
