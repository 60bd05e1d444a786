/* listen_addr.h - which hosts ax listens on: one rule for ax_metrics_serve
 * (src/obs/metrics.c) and ax-upstream --bind (tools/ax-upstream.c). */
#ifndef AX_LISTEN_ADDR_H
#define AX_LISTEN_ADDR_H

#include <stdint.h>
#include <sys/socket.h>

/* host is "localhost" (127.0.0.1), a numeric IPv4 address ("0.0.0.0",
 * "127.0.0.1") or a numeric IPv6 address, bare or in brackets ("::1",
 * "[::1]"). No name lookup: a listening address is never resolved. Fills
 * *ss and *len with host and port; AX_EINVAL otherwise, with the detail
 * "WHO: 'HOST' is not localhost or a numeric IPv4 or IPv6 address". */
int listen_addr_parse(const char *who, const char *host, uint16_t port,
                      struct sockaddr_storage *ss, socklen_t *len);

/* The port of an address listen_addr_parse() filled (or getsockname gave). */
uint16_t listen_addr_port(const struct sockaddr_storage *ss);

#endif
