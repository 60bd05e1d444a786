/* ax_http.h - HTTP from inside ax tasks, through libcurl (libax_http).
 *
 * A task calls ax_http_perform with a curl easy handle it configured and is
 * suspended (its coroutine parks, the worker thread goes on) until the
 * transfer ends. Each worker drives one curl multi handle through its own
 * epoll reactor and timing wheel (curl's multi_socket interface), so
 * connections are reused across the tasks of a worker and no thread exists
 * per request. The transfer is bounded by the task's remaining deadline
 * (ax_http_perform sets CURLOPT_TIMEOUT_MS) and aborted at once — its
 * connection closed — when the task times out or is cancelled.
 *
 * Connections are kept alive as a curl user expects: a worker's connection
 * cache holds as many as it has had requests in flight (ax_http_config), so
 * R requests with at most K in flight on a worker open at most K
 * connections from that worker to an HTTP/1.1 server that keeps them open.
 * The cache is per worker, never shared: the process may hold up to
 * workers x K. ax_http_get/post
 * take their easy handles from a bounded per-worker pool and ask for HTTP/2
 * over TLS (ALPN); when the server offers it, the tasks of a worker share
 * one multiplexed connection per host. Plain http:// stays HTTP/1.1 unless
 * http_version asks for prior knowledge (h2c).
 *
 * Link with libax_http and libcurl: pkg-config ax_http (shared: the lib
 * directory must be on the run-time path, e.g. -Wl,-rpath), or CMake
 * find_package(ax) and ax::ax_http (static) / ax::ax_http_shared. Static ax
 * on Debian, where pkg-config --static fails on libcurl.pc's static deps:
 *   -Wl,-Bstatic -lax_http -lax -Wl,-Bdynamic -lcurl -ldw -lpthread -lm
 */
#ifndef AX_HTTP_H
#define AX_HTTP_H

#include <ax.h>
#include <curl/curl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Run a transfer on the calling task's worker. ax uses three of the
 * handle's options for it: CURLOPT_TIMEOUT_MS is set to the task's
 * remaining deadline (replacing any value of the caller's: bound a transfer
 * tighter with CURLOPT_LOW_SPEED_* or a shorter task timeout),
 * CURLOPT_ERRORBUFFER is ax's during the call and unset after it (curl's
 * message is in ax_error_detail()), and CURLOPT_PRIVATE is ax's during the
 * call and the caller's again after it. The handle's protocols are the
 * caller's choice (CURLOPT_PROTOCOLS_STR). Returns 0 when it completed
 * (whatever the HTTP status: read CURLINFO_RESPONSE_CODE), AX_ETIMEDOUT or
 * AX_ECANCELED, AX_EINVAL for a bad handle or URL, AX_ENET for a failed
 * transfer (refused, reset, DNS, TLS, a reply that is not HTTP, ...) with
 * curl's message in ax_error_detail(). If curl_code is not NULL it receives
 * curl's result, or, when ax ended or refused the transfer before curl had
 * one, never CURLE_OK: CURLE_OPERATION_TIMEDOUT (deadline),
 * CURLE_ABORTED_BY_CALLBACK (cancel, shutdown), CURLE_BAD_FUNCTION_ARGUMENT
 * (AX_EINVAL, AX_ESTATE), CURLE_OUT_OF_MEMORY (AX_ENOMEM). */
int ax_http_perform(ax_task *t, CURL *easy, CURLcode *curl_code);

typedef struct ax_http_response {
    long status;        /* HTTP status, 0 if none was received */
    char *headers;      /* raw response header lines, NUL-terminated; "" when none came,
                           also when the call was refused before any request */
    size_t headers_len;
    char *body;         /* NUL-terminated (the NUL is not counted in body_len); "" as
                           headers. Both are malloc'd (NULL only if even "" could
                           not be): ax_http_response_free, or free() each */
    size_t body_len;
} ax_http_response;

/* GET / POST url, at most timeout_ms (< 0: the task's deadline only; 0:
 * AX_ETIMEDOUT at once, nothing sent). url must be http:// or https://
 * (AX_EINVAL otherwise: libcurl's other protocols, file:// included, are
 * off). Redirects are not followed: a 3xx comes back as it is (follow one
 * through ax_http_perform with CURLOPT_FOLLOWLOCATION). A POST body may be
 * NULL only with len 0; content_type (NULL: none) is at most 255 bytes with
 * no control character but HTAB (AX_EINVAL: it would forge header lines).
 * The response's body is kept up to ax_http_config.max_body (64 MiB by
 * default; longer: AX_ENET, "the response's body is longer than ...").
 * Either bound ending the request returns AX_ETIMEDOUT; when it was
 * timeout_ms, the task's deadline still ahead, ax_error_detail() says so
 * ("ax_http_get: no answer within timeout_ms 300 (...)"). The task may go
 * on; if it returns the code, pass the detail to ax_task_set_error first,
 * or its result reads only "task returned -7".
 * *out must be released with ax_http_response_free, also on error. */
int ax_http_get(ax_task *t, const char *url, int64_t timeout_ms, ax_http_response *out);
int ax_http_post(ax_task *t, const char *url, const char *content_type, const void *body,
                 size_t len, int64_t timeout_ms, ax_http_response *out);
void ax_http_response_free(ax_http_response *r);

/* Connection reuse and HTTP/2, per scheduler. The limits apply to each
 * worker's multi handle (each worker has its own connection cache), so the
 * process holds at most workers x the figure. */
typedef struct ax_http_config {
    long max_connects;         /* connections a worker's cache keeps open, busy or idle
                                  (CURLMOPT_MAXCONNECTS); 0 = follow the requests in flight:
                                  4 x the most this worker has had at once, at most a
                                  quarter of the open-file limit (RLIMIT_NOFILE) shared
                                  by the scheduler's workers, at least 16 (default 0) */
    long max_host_connections; /* connections per host per worker; more requests wait in
                                  curl for one (CURLMOPT_MAX_HOST_CONNECTIONS); 0 = no
                                  limit (default 0) */
    long max_total_connections; /* connections per worker, likewise
                                   (CURLMOPT_MAX_TOTAL_CONNECTIONS); 0 = no limit (0) */
    bool multiplex;            /* several requests share one HTTP/2 connection
                                  (CURLMOPT_PIPELINING CURLPIPE_MULTIPLEX; for https:// and
                                  h2c, ax_http_get/post also wait for a connection being
                                  set up to know whether it multiplexes, CURLOPT_PIPEWAIT)
                                  (default true) */
    long http_version;         /* CURLOPT_HTTP_VERSION of ax_http_get/post:
                                  CURL_HTTP_VERSION_2TLS (default: h2 when TLS's ALPN
                                  offers it, else HTTP/1.1), _1_1, _2_0, _2_PRIOR_KNOWLEDGE
                                  (h2c; refused with libcurl 7.88.x, which breaks reused
                                  prior-knowledge connections), ...
                                  ax_http_perform uses the caller's handle as set */
    unsigned easy_pool;        /* idle easy handles ax_http_get/post keep per worker for
                                  the next request (curl_easy_reset; at most 65536)
                                  (default 64) */
    size_t max_body;           /* bytes of response body ax_http_get/post keep in memory; a
                                  longer body aborts the request with AX_ENET and a detail
                                  that says so (the header lines are bounded at 1 MiB;
                                  libcurl 7.84 and later refuse 300 KiB first);
                                  SIZE_MAX: no bound; 0: the default (64 MiB), as in a
                                  config made without ax_http_config_default */
} ax_http_config;

void ax_http_config_default(ax_http_config *cfg);

/* Set s's HTTP settings, from any thread, at any time: each worker applies
 * them before its next request. Lowering a connection limit (max_connects,
 * max_host_connections, max_total_connections) closes the worker's idle
 * connections as soon as none of its transfers is in flight: at that
 * request if none is, else when the last of them ends (all of them: the
 * cache starts empty under the new limits). AX_EINVAL with a detail
 * naming the field for a bad value, a NULL s or cfg, or an HTTP version
 * this libcurl lacks. */
int ax_http_configure(ax_sched *s, const ax_http_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
