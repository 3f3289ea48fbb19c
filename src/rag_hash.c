/*
** rag_hash.c: SHA-256 (FIPS 180-4) through OpenSSL's EVP one-shot digest,
** which is thread-safe and keeps no state between calls.
*/
#include "rag_hash.h"

#include <openssl/evp.h>

#include "rag.h"

int rag_hash_sha256(const void *data, size_t len, unsigned char out[RAG_SHA256_LEN]) {
  unsigned int n = 0;
  if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != RAG_SHA256_LEN)
    return RAG_ENOMEM;
  return RAG_OK;
}
