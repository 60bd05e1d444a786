/* listen_addr.c - the hosts ax listens on (see listen_addr.h).
 *
 * ax_metrics_serve and ax-upstream --bind once had rules of their own: the
 * first took "localhost" and IPv4, the second IPv4 and IPv6 but not
 * "localhost". Both now call this, so an address that works for one works
 * for the other, and a refusal reads the same.
 */
#include "listen_addr.h"

#include "internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

int listen_addr_parse(const char *who, const char *host, uint16_t port,
                      struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    if (!host)
        return ax_fail(AX_EINVAL, "%s: no host", who);
    for (const char *p = host; *p; p++) /* named, not echoed: a newline splits a log line */
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return ax_fail(AX_EINVAL, "%s: the host has a control byte (0x%02x) at offset %zu", who,
                           (unsigned)(unsigned char)*p, (size_t)(p - host));
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    const char *v4 = strcmp(host, "localhost") == 0 ? "127.0.0.1" : host;
    if (inet_pton(AF_INET, v4, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
        *len = sizeof *a4;
        return AX_OK;
    }
    char v6[INET6_ADDRSTRLEN + 2];
    size_t n = strlen(host);
    if (n >= 2 && n < sizeof v6 && host[0] == '[' && host[n - 1] == ']') {
        memcpy(v6, host + 1, n - 2); /* "[::1]" as in a URL */
        v6[n - 2] = '\0';
    } else if (n < sizeof v6) {
        memcpy(v6, host, n + 1);
    } else {
        v6[0] = '\0';
    }
    if (v6[0] && inet_pton(AF_INET6, v6, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        *len = sizeof *a6;
        return AX_OK;
    }
    memset(ss, 0, sizeof *ss);
    return ax_fail(AX_EINVAL, "%s: '%s' is not localhost or a numeric IPv4 or IPv6 address", who,
                   host);
}

uint16_t listen_addr_port(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)ss)->sin_port);
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return 0;
}
