/* redis_queue.h - an ax_redis queue on the tests' private server
 * (redis_server.h), its defaults but for the name and the port. */
#ifndef REDIS_QUEUE_H
#define REDIS_QUEUE_H

#include "check.h"

#include <ax_redis.h>
#include <stdint.h>

static inline ax_redis_queue *rs_queue(int port, const char *name)
{
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = name;
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    return q;
}

#endif
