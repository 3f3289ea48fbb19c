/*
** rag_http.h: one blocking HTTP(S) request over libcurl's easy interface,
** with a total deadline, a connect deadline and a response size cap that
** holds for chunked bodies too. http and https only, TLS always verified.
*/
#ifndef RAG_HTTP_H
#define RAG_HTTP_H

#include <stddef.h>

/* A request. Every pointer is borrowed for the duration of the call. */
typedef struct rag_http_req {
  const char *method;          /* "GET", "POST", ...; never NULL */
  const char *url;             /* http:// or https:// */
  const char *const *headers;  /* "Name: value" lines, NULL-terminated, or NULL */
  const char *body;            /* request body or NULL */
  size_t body_len;
  double timeout;              /* whole request, seconds, > 0 */
  double connect_timeout;      /* connection phase, seconds, > 0 */
  size_t max_body;             /* response body cap, bytes */
  long max_redirects;          /* same-origin redirects to follow; others are returned */
  const char *ca_file;         /* PEM bundle trusted instead of the system store, or NULL */
  /*
  ** Optional. When set, each piece of the final response's body is passed
  ** to on_data(ud, data, len) as it arrives, instead of being kept, if the
  ** status is 2xx; other bodies are kept as usual. max_body still counts
  ** every byte. A nonzero return stops the transfer: the call then fails
  ** with RAG_EHTTP and the message "stopped by the body callback".
  */
  int (*on_data)(void *ud, const char *data, size_t len);
  void *ud;
} rag_http_req;

/* A response, owned by the core and released with rag_http_res_free. */
typedef struct rag_http_res {
  long status;
  char *head;       /* the final response's header lines, CRLF-separated */
  size_t head_len;
  char *body;
  size_t body_len;
} rag_http_res;

/*
** Performs `req`. On RAG_OK, *out is a new response (any status, 4xx and
** 5xx included). Otherwise *out is NULL and `err` (errlen bytes, may be 0)
** holds a message: RAG_ETIMEOUT (a deadline passed), RAG_ETOOBIG (the body
** or headers exceeded their caps), RAG_EHTTP (DNS, connect, TLS, protocol,
** unsupported scheme), RAG_ENOMEM.
*/
int rag_http_request(const rag_http_req *req, rag_http_res **out, char *err,
                     size_t errlen);

/* Frees a response; passing NULL is a harmless no-op. */
void rag_http_res_free(rag_http_res *res);

#endif
