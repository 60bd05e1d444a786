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
 * Link with libax_http and libcurl (pkg-config libcurl; CMake ax::ax_http).
 */
#ifndef AX_HTTP_H
#define AX_HTTP_H

#include <ax.h>
#include <curl/curl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Run a transfer on the calling task's worker. Returns 0 when it completed
 * (whatever the HTTP status: read CURLINFO_RESPONSE_CODE), AX_ETIMEDOUT or
 * AX_ECANCELED, AX_EINVAL for a bad handle or URL, AX_ENET for a failed
 * transfer (refused, reset, DNS, TLS, ...) with curl's message in
 * ax_error_detail(). If curl_code is not NULL it receives curl's result. */
int ax_http_perform(ax_task *t, CURL *easy, CURLcode *curl_code);

typedef struct ax_http_response {
    long status;        /* HTTP status, 0 if none was received */
    char *headers;      /* raw response header lines, NUL-terminated */
    size_t headers_len;
    char *body;         /* NUL-terminated (the NUL is not counted in body_len) */
    size_t body_len;
} ax_http_response;

/* GET / POST url, at most timeout_ms (< 0: the task's deadline only).
 * *out must be released with ax_http_response_free, also on error. */
int ax_http_get(ax_task *t, const char *url, int64_t timeout_ms, ax_http_response *out);
int ax_http_post(ax_task *t, const char *url, const char *content_type, const void *body,
                 size_t len, int64_t timeout_ms, ax_http_response *out);
void ax_http_response_free(ax_http_response *r);

#ifdef __cplusplus
}
#endif
#endif
