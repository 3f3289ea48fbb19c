/*
** rag_http.c: the libcurl transport. Caps are enforced in the write and
** header callbacks because CURLOPT_MAXFILESIZE does not stop a chunked body
** (libcurl 7.88). curl_global_init runs once per process via pthread_once.
*/
#include "rag_http.h"

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "rag.h"

#ifndef RAG_HTTP_MAX_HEAD
#define RAG_HTTP_MAX_HEAD (256 * 1024) /* no real API sends more headers */
#endif

typedef struct sink {
  char *p;
  size_t len, cap, max;
  size_t seen;  /* bytes offered by libcurl, kept or not */
  int overflow; /* the cap was hit */
  int nomem;    /* an allocation failed */
} sink;

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;

static void global_init(void) {
  global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int sink_add(sink *s, const char *data, size_t n) {
  s->seen += n;
  if (n > s->max - s->len) {
    s->overflow = 1;
    return 0;
  }
  if (n > s->cap - s->len) {
    size_t cap = s->cap ? s->cap : 4096;
    char *p;
    while (cap - s->len < n) cap = cap > s->max / 2 ? s->max : cap * 2;
    p = (char *)rag_realloc(s->p, cap);
    if (p == NULL) {
      s->nomem = 1;
      return 0;
    }
    s->p = p;
    s->cap = cap;
  }
  memcpy(s->p + s->len, data, n);
  s->len += n;
  return 1;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
  (void)size; /* always 1 */
  return sink_add((sink *)ud, data, nmemb) ? nmemb : 0;
}

/* Keeps only the last response's headers (after 1xx, redirects). */
static size_t on_head(char *data, size_t size, size_t nmemb, void *ud) {
  sink *s = (sink *)ud;
  (void)size;
  if (nmemb >= 5 && memcmp(data, "HTTP/", 5) == 0) s->len = 0;
  return sink_add(s, data, nmemb) ? nmemb : 0;
}

static long to_ms(double seconds) {
  double ms = ceil(seconds * 1000.0);
  return ms > 2147483647.0 ? 2147483647L : (long)ms;
}

static int has_header(const char *const *h, const char *name) {
  size_t n = strlen(name);
  for (; h != NULL && *h != NULL; h++)
    if (strncasecmp(*h, name, n) == 0 && (*h)[n] == ':') return 1;
  return 0;
}

static int build_headers(const rag_http_req *req, struct curl_slist **out) {
  struct curl_slist *list = NULL, *next;
  const char *const *h;
  for (h = req->headers; h != NULL && *h != NULL; h++) {
    if ((next = curl_slist_append(list, *h)) == NULL) goto nomem;
    list = next;
  }
  /* No "Expect: 100-continue" pause before large bodies. */
  if (!has_header(req->headers, "Expect")) {
    if ((next = curl_slist_append(list, "Expect:")) == NULL) goto nomem;
    list = next;
  }
  *out = list;
  return RAG_OK;
nomem:
  curl_slist_free_all(list);
  return RAG_ENOMEM;
}

static void set_method(CURL *c, const rag_http_req *req) {
  int get = strcmp(req->method, "GET") == 0;
  int post = strcmp(req->method, "POST") == 0;
  if (req->body != NULL) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    if (!post) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
  } else if (strcmp(req->method, "HEAD") == 0) {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (!get) {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
  }
}

static void configure(CURL *c, const rag_http_req *req, struct curl_slist *hl,
                      sink *head, sink *body, char *curl_err) {
  curl_easy_setopt(c, CURLOPT_URL, req->url);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, req->max_redirects > 0 ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, req->max_redirects);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_VERBOSE, 0L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  if (req->ca_file != NULL) curl_easy_setopt(c, CURLOPT_CAINFO, req->ca_file);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, to_ms(req->timeout));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, to_ms(req->connect_timeout));
  curl_easy_setopt(c, CURLOPT_USERAGENT, "rag/" RAG_VERSION);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_head);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, head);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
  set_method(c, req);
}

static int map_error(CURLcode rc, const sink *head, const sink *body,
                     const char *curl_err, char *err, size_t errlen) {
  char cap[120];
  const char *what = curl_err[0] != '\0' ? curl_err : curl_easy_strerror(rc);
  int status = RAG_EHTTP;
  if (head->nomem || body->nomem || rc == CURLE_OUT_OF_MEMORY) {
    status = RAG_ENOMEM;
    what = "not enough memory";
  } else if (body->overflow) {
    status = RAG_ETOOBIG;
    snprintf(cap, sizeof cap,
             "response body exceeds max_body (%lu bytes; stopped after %lu)",
             (unsigned long)body->max, (unsigned long)body->seen);
    what = cap;
  } else if (head->overflow) {
    status = RAG_ETOOBIG;
    what = "response headers too large";
  } else if (rc == CURLE_OPERATION_TIMEDOUT) {
    status = RAG_ETIMEOUT;
  }
  if (errlen > 0) snprintf(err, errlen, "%s", what);
  return status;
}

int rag_http_request(const rag_http_req *req, rag_http_res **out, char *err,
                     size_t errlen) {
  char curl_err[CURL_ERROR_SIZE] = "";
  sink head = {NULL, 0, 0, RAG_HTTP_MAX_HEAD, 0, 0, 0};
  sink body = {NULL, 0, 0, 0, 0, 0, 0};
  struct curl_slist *hl = NULL;
  rag_http_res *res;
  CURLcode rc;
  CURL *c;
  int status;
  *out = NULL;
  if (errlen > 0) err[0] = '\0';
  body.max = req->max_body;
  pthread_once(&global_once, global_init);
  if (global_rc != CURLE_OK) {
    if (errlen > 0) snprintf(err, errlen, "%s", curl_easy_strerror(global_rc));
    return RAG_EHTTP;
  }
  res = (rag_http_res *)rag_malloc(sizeof *res);
  c = curl_easy_init();
  if (res == NULL || c == NULL || build_headers(req, &hl) != RAG_OK) {
    rag_free(res);
    curl_easy_cleanup(c);
    if (errlen > 0) snprintf(err, errlen, "not enough memory");
    return RAG_ENOMEM;
  }
  configure(c, req, hl, &head, &body, curl_err);
  rc = curl_easy_perform(c);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res->status);
    res->head = head.p;
    res->head_len = head.len;
    res->body = body.p;
    res->body_len = body.len;
    *out = res;
    status = RAG_OK;
  } else {
    status = map_error(rc, &head, &body, curl_err, err, errlen);
    rag_free(head.p);
    rag_free(body.p);
    rag_free(res);
  }
  curl_easy_cleanup(c);
  curl_slist_free_all(hl);
  return status;
}

void rag_http_res_free(rag_http_res *res) {
  if (res == NULL) return;
  rag_free(res->head);
  rag_free(res->body);
  rag_free(res);
}
