/*
** rag_http.c: the libcurl transport. Caps are enforced in the write and
** header callbacks because CURLOPT_MAXFILESIZE does not stop a chunked body
** (libcurl 7.88). libcurl is opened, and curl_global_init run, once per
** process via pthread_once, on the first request.
*/
#include "rag_http.h"

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "rag.h"
#include "rag_dl.h"

#ifndef RAG_HTTP_MAX_HEAD
#define RAG_HTTP_MAX_HEAD (256 * 1024) /* no real API sends more headers */
#endif

typedef struct sink {
  char *p;
  size_t len, cap, max;
  size_t seen;  /* bytes offered by libcurl, kept or not */
  int overflow; /* the cap was hit */
  int nomem;    /* an allocation failed */
  int stopped;  /* on_data asked to stop */
  CURL *curl;   /* for the status, when on_data is set */
  int (*on_data)(void *ud, const char *data, size_t len);
  void *ud;
} sink;

/*
** libcurl is opened on the first request, not when the library loads: it and
** the libraries it pulls in (TLS, Kerberos, LDAP, SSH, ...: 28 on Debian 12)
** add about 4 MB resident to a process that makes none, which is most that
** only index and search, and every OpenResty worker (its requests go
** through cosockets). The table is written once, under pthread_once with
** curl_global_init, and only read after that.
*/
static struct {
  CURLcode (*global_init)(long);
  CURL *(*easy_init)(void);
  CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
  CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
  CURLcode (*easy_perform)(CURL *);
  void (*easy_cleanup)(CURL *);
  const char *(*easy_strerror)(CURLcode);
  struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
  void (*slist_free_all)(struct curl_slist *);
  CURLU *(*url)(void);
  void (*url_cleanup)(CURLU *);
  CURLUcode (*url_set)(CURLU *, CURLUPart, const char *, unsigned int);
  CURLUcode (*url_get)(CURLU *, CURLUPart, char **, unsigned int);
  void (*free)(void *);
  int ok;
} cu;

#define NCURL 14

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;

static void global_init(void) {
  static const char *const sonames[] = {"libcurl.so.4", "libcurl.so", NULL};
  static const char *const names[NCURL] = {
      "curl_global_init", "curl_easy_init",      "curl_easy_setopt",    "curl_easy_getinfo",
      "curl_easy_perform", "curl_easy_cleanup",  "curl_easy_strerror",  "curl_slist_append",
      "curl_slist_free_all", "curl_url",         "curl_url_cleanup",    "curl_url_set",
      "curl_url_get",      "curl_free"};
  void *f[NCURL];
  if (!rag_dl_open(sonames, names, NCURL, f)) return;
  memcpy(&cu.global_init, &f[0], sizeof f[0]);
  memcpy(&cu.easy_init, &f[1], sizeof f[1]);
  memcpy(&cu.easy_setopt, &f[2], sizeof f[2]);
  memcpy(&cu.easy_getinfo, &f[3], sizeof f[3]);
  memcpy(&cu.easy_perform, &f[4], sizeof f[4]);
  memcpy(&cu.easy_cleanup, &f[5], sizeof f[5]);
  memcpy(&cu.easy_strerror, &f[6], sizeof f[6]);
  memcpy(&cu.slist_append, &f[7], sizeof f[7]);
  memcpy(&cu.slist_free_all, &f[8], sizeof f[8]);
  memcpy(&cu.url, &f[9], sizeof f[9]);
  memcpy(&cu.url_cleanup, &f[10], sizeof f[10]);
  memcpy(&cu.url_set, &f[11], sizeof f[11]);
  memcpy(&cu.url_get, &f[12], sizeof f[12]);
  memcpy(&cu.free, &f[13], sizeof f[13]);
  cu.ok = 1;
  global_rc = cu.global_init(CURL_GLOBAL_DEFAULT);
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
  sink *s = (sink *)ud;
  long code = 0;
  (void)size; /* always 1 */
  if (s->on_data != NULL &&
      cu.easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK &&
      code >= 200 && code <= 299) {
    s->seen += nmemb;
    if (s->seen > s->max) {
      s->overflow = 1;
      return 0;
    }
    if (nmemb > 0 && s->on_data(s->ud, data, nmemb) != 0) {
      s->stopped = 1;
      return 0;
    }
    return nmemb;
  }
  return sink_add(s, data, nmemb) ? nmemb : 0;
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
    if ((next = cu.slist_append(list, *h)) == NULL) goto nomem;
    list = next;
  }
  /* No "Expect: 100-continue" pause before large bodies. */
  if (!has_header(req->headers, "Expect")) {
    if ((next = cu.slist_append(list, "Expect:")) == NULL) goto nomem;
    list = next;
  }
  *out = list;
  return RAG_OK;
nomem:
  cu.slist_free_all(list);
  return RAG_ENOMEM;
}

static void set_method(CURL *c, const rag_http_req *req) {
  int get = strcmp(req->method, "GET") == 0;
  int post = strcmp(req->method, "POST") == 0;
  if (req->body != NULL) {
    cu.easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
    cu.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    if (!post) cu.easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
  } else if (strcmp(req->method, "HEAD") == 0) {
    cu.easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (!get) {
    cu.easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
  }
}

/* Fails closed: without PROTOCOLS_STR (libcurl < 7.85) file:// would work. */
static CURLcode configure(CURL *c, const rag_http_req *req, struct curl_slist *hl,
                          sink *head, sink *body, char *curl_err) {
  CURLcode rc = cu.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  cu.easy_setopt(c, CURLOPT_URL, req->url);
  cu.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  cu.easy_setopt(c, CURLOPT_VERBOSE, 0L);
  cu.easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  cu.easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  if (req->ca_file != NULL) cu.easy_setopt(c, CURLOPT_CAINFO, req->ca_file);
  cu.easy_setopt(c, CURLOPT_TIMEOUT_MS, to_ms(req->timeout));
  cu.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, to_ms(req->connect_timeout));
  cu.easy_setopt(c, CURLOPT_USERAGENT, "rag/" RAG_VERSION);
  cu.easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  cu.easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  cu.easy_setopt(c, CURLOPT_WRITEDATA, body);
  cu.easy_setopt(c, CURLOPT_HEADERFUNCTION, on_head);
  cu.easy_setopt(c, CURLOPT_HEADERDATA, head);
  cu.easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
  set_method(c, req);
  return rc;
}

/* {====== Redirects ======} */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
** Same scheme, host and port. Redirects are followed only within one origin,
** because libcurl would carry custom headers such as "x-api-key" to any host
** it is sent to. Any parse or allocation failure means "not the same".
*/
static int same_origin(const char *a, const char *b) {
  static const CURLUPart parts[] = {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT};
  CURLU *ua = cu.url(), *ub = cu.url();
  int same = ua != NULL && ub != NULL &&
             cu.url_set(ua, CURLUPART_URL, a, 0) == CURLUE_OK &&
             cu.url_set(ub, CURLUPART_URL, b, 0) == CURLUE_OK;
  for (int i = 0; same && i < 3; i++) {
    char *pa = NULL, *pb = NULL;
    unsigned flags = parts[i] == CURLUPART_PORT ? CURLU_DEFAULT_PORT : 0;
    same = cu.url_get(ua, parts[i], &pa, flags) == CURLUE_OK &&
           cu.url_get(ub, parts[i], &pb, flags) == CURLUE_OK &&
           strcasecmp(pa, pb) == 0;
    cu.free(pa);
    cu.free(pb);
  }
  cu.url_cleanup(ua);
  cu.url_cleanup(ub);
  return same;
}

/*
** After a response: if it is a redirect we may follow, points the handle at
** the new URL (POST becomes GET on 301/302, anything but HEAD on 303, as
** browsers do) with what is left of the deadline, and returns 1.
*/
static int follow(CURL *c, const rag_http_req *req, long hops, double start,
                  sink *head, sink *body) {
  long code = 0;
  char *loc = NULL, *cur = NULL;
  double left = req->timeout - (now() - start);
  int head_only = strcmp(req->method, "HEAD") == 0;
  if (hops >= req->max_redirects || left <= 0) return 0;
  cu.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  if (code != 301 && code != 302 && code != 303 && code != 307 && code != 308) return 0;
  if (cu.easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc) != CURLE_OK || loc == NULL ||
      cu.easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &cur) != CURLE_OK || cur == NULL ||
      !same_origin(cur, loc) || cu.easy_setopt(c, CURLOPT_URL, loc) != CURLE_OK)
    return 0;
  cu.easy_setopt(c, CURLOPT_TIMEOUT_MS, to_ms(left));
  if ((code == 303 && !head_only) ||
      ((code == 301 || code == 302) && strcmp(req->method, "POST") == 0)) {
    cu.easy_setopt(c, CURLOPT_CUSTOMREQUEST, NULL);
    cu.easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  head->len = body->len = body->seen = 0;
  return 1;
}

static int map_error(CURLcode rc, const sink *head, const sink *body,
                     const char *curl_err, char *err, size_t errlen) {
  char cap[120];
  const char *what = curl_err[0] != '\0' ? curl_err : cu.easy_strerror(rc);
  int status = RAG_EHTTP;
  if (body->stopped) {
    what = "stopped by the body callback";
  } else if (head->nomem || body->nomem) { /* libcurl's own OOM also means "header too long" */
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
  sink head, body;
  struct curl_slist *hl = NULL;
  rag_http_res *res;
  CURLcode rc;
  CURL *c;
  int status;
  *out = NULL;
  if (errlen > 0) err[0] = '\0';
  memset(&head, 0, sizeof head);
  memset(&body, 0, sizeof body);
  head.max = RAG_HTTP_MAX_HEAD;
  body.max = req->max_body;
  body.on_data = req->on_data;
  body.ud = req->ud;
  pthread_once(&global_once, global_init);
  if (!cu.ok) {
    if (errlen > 0) snprintf(err, errlen, "libcurl.so.4 cannot be opened (Debian: libcurl4)");
    return RAG_EHTTP;
  }
  if (global_rc != CURLE_OK) {
    if (errlen > 0) snprintf(err, errlen, "%s", cu.easy_strerror(global_rc));
    return RAG_EHTTP;
  }
  res = (rag_http_res *)rag_malloc(sizeof *res);
  c = cu.easy_init();
  if (res == NULL || c == NULL || build_headers(req, &hl) != RAG_OK) {
    rag_free(res);
    cu.easy_cleanup(c);
    if (errlen > 0) snprintf(err, errlen, "not enough memory");
    return RAG_ENOMEM;
  }
  body.curl = c;
  if (configure(c, req, hl, &head, &body, curl_err) != CURLE_OK) {
    snprintf(curl_err, sizeof curl_err, "libcurl cannot restrict protocols");
    rc = CURLE_UNSUPPORTED_PROTOCOL;
  } else {
    double start = now();
    for (long hops = 0;; hops++) {
      rc = cu.easy_perform(c);
      if (rc != CURLE_OK || !follow(c, req, hops, start, &head, &body)) break;
    }
  }
  if (rc == CURLE_OK) {
    cu.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res->status);
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
  cu.easy_cleanup(c);
  cu.slist_free_all(hl);
  return status;
}

void rag_http_res_free(rag_http_res *res) {
  if (res == NULL) return;
  rag_free(res->head);
  rag_free(res->body);
  rag_free(res);
}
