/* redis_kill.h - what the consumer-kill tests (test_redis_kill on one
 * redis-server, test_redis_cluster on a 3-node cluster) ask Redis about the
 * consumer they SIGKILL: the entries it holds, and of those the ones it has
 * already run (its execution log: one message number per line), which must
 * run again elsewhere once claimed -- duplicates the tests count. The
 * messages' payloads are their numbers, 0 .. n - 1. */
#ifndef AX_TEST_REDIS_KILL_H
#define AX_TEST_REDIS_KILL_H

#include "check.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const rk_streams[] = {"high", "normal", "low"};

/* Entries of queue `q` delivered to consumer `name` and not yet acknowledged. */
static inline long long rk_pending_of(redisContext *rc, const char *q, const char *name)
{
    long long n = 0;
    for (int k = 0; k < 3; k++) {
        redisReply *r = redisCommand(rc, "XPENDING ax:{%s}:%s ax - + 1000 %s", q, rk_streams[k], name);
        CHECK(r && r->type == REDIS_REPLY_ARRAY);
        n += (long long)r->elements;
        freeReplyObject(r);
    }
    return n;
}

/* Of those, the ones whose message `log_path` says it has run. */
static inline long long rk_ran_pending_of(redisContext *rc, const char *q, const char *name,
                                          const char *log_path, int n_msgs)
{
    unsigned char *ran = calloc((size_t)n_msgs, 1);
    CHECK(ran != NULL);
    FILE *f = fopen(log_path, "r");
    CHECK(f != NULL);
    char line[64];
    while (fgets(line, sizeof line, f)) {
        int k = atoi(line);
        if (k >= 0 && k < n_msgs)
            ran[k] = 1;
    }
    fclose(f);
    long long n = 0;
    for (int k = 0; k < 3; k++) {
        redisReply *r = redisCommand(rc, "XPENDING ax:{%s}:%s ax - + 1000 %s", q, rk_streams[k], name);
        CHECK(r && r->type == REDIS_REPLY_ARRAY);
        for (size_t i = 0; i < r->elements; i++) {
            const char *id = r->element[i]->element[0]->str;
            redisReply *e = redisCommand(rc, "XRANGE ax:{%s}:%s %s %s", q, rk_streams[k], id, id);
            CHECK(e && e->type == REDIS_REPLY_ARRAY && e->elements == 1);
            redisReply *fields = e->element[0]->element[1];
            for (size_t j = 0; j + 1 < fields->elements; j += 2)
                if (strcmp(fields->element[j]->str, "p") == 0) {
                    int m = atoi(fields->element[j + 1]->str);
                    if (m >= 0 && m < n_msgs && ran[m])
                        n++;
                }
            freeReplyObject(e);
        }
        freeReplyObject(r);
    }
    free(ran);
    return n;
}

#endif
