/* url.c - the rule for a base URL given on the command line (ax-demo --url,
 * ax-worker --url), shared so both tools take and refuse the same ones.
 *
 * A base URL is http:// or https://, with a host, in a form libcurl parses
 * (the calls go through it): class paths are appended to it, so a URL
 * without a host would turn the first path segment into one ("http://" +
 * "/quote" is a request to host "quote"). Only the text is checked here:
 * whether it answers is ax-demo's business (dm_url_check), not ax-worker's,
 * which may start before its upstream does.
 */
#include "demo.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

int dm_url_base_check(const char *url, char *err, size_t errlen)
{
    if (strlen(url) >= DM_URL_MAX - DM_PATH_MAX) {
        snprintf(err, errlen, "too long (%zu bytes, at most %d)", strlen(url),
                 DM_URL_MAX - DM_PATH_MAX - 1);
        return -1;
    }
    size_t scheme = strncmp(url, "http://", 7) == 0 ? 7 : strncmp(url, "https://", 8) == 0 ? 8 : 0;
    if (!scheme) {
        snprintf(err, errlen, "'%s' is not an http:// or https:// URL", url);
        return -1;
    }
    /* libcurl reads "http:///x" as host "x": a host must come first. */
    const char *h = url + scheme;
    if (!*h || *h == '/' || *h == '?' || *h == '#') {
        snprintf(err, errlen, "'%s' has no host", url);
        return -1;
    }
    CURLU *u = curl_url();
    if (!u) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
    /* A query or fragment would take the class paths appended after it:
     * "http://h?x=1" + "/quote" asked for "/" with a query, "#f" + "/quote"
     * for "/" alone (review). Port 0 reaches nothing. */
    char *part = NULL;
    const char *why = NULL;
    if (rc == CURLUE_OK && curl_url_get(u, CURLUPART_QUERY, &part, 0) == CURLUE_OK)
        why = "has a query (class paths are appended to the URL)";
    else if (rc == CURLUE_OK && curl_url_get(u, CURLUPART_FRAGMENT, &part, 0) == CURLUE_OK)
        why = "has a fragment (class paths are appended to the URL)";
    else if (rc == CURLUE_OK && curl_url_get(u, CURLUPART_PORT, &part, 0) == CURLUE_OK &&
             strcmp(part, "0") == 0)
        why = "has port 0";
    curl_free(part);
    curl_url_cleanup(u);
    if (rc == CURLUE_NO_HOST) { /* "http://:80", "http://user@" */
        snprintf(err, errlen, "'%s' has no host", url);
        return -1;
    }
    if (rc != CURLUE_OK) {
        snprintf(err, errlen, "'%s': %s", url, curl_url_strerror(rc));
        return -1;
    }
    if (why) {
        snprintf(err, errlen, "'%s' %s", url, why);
        return -1;
    }
    return 0;
}
