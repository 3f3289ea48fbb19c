/*
** rag_digest.h: content hashes for caches and dedup, computed by OpenSSL's
** libcrypto rather than by hand, the CRC-32 that guards saved files, and
** what password authentication needs (HMAC, PBKDF2, MD5, random bytes).
*/
#ifndef RAG_DIGEST_H
#define RAG_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define RAG_DIGEST_SHA256_LEN 32
#define RAG_DIGEST_MD5_LEN 16

/*
** SHA-256 of `len` bytes at `data` (borrowed) into `out` (caller's 32
** bytes). Returns RAG_OK, or RAG_ENOMEM when libcrypto fails.
*/
int rag_digest_sha256(const void *data, size_t len, unsigned char out[RAG_DIGEST_SHA256_LEN]);

/*
** SHA-256 of n parts end to end, part i being len[i] bytes at data[i] (all
** borrowed), into `out`: what rag_digest_sha256 gives for their
** concatenation, without building it. RAG_OK or RAG_ENOMEM.
*/
int rag_digest_sha256_parts(const void *const *data, const size_t *len, size_t n,
                            unsigned char out[RAG_DIGEST_SHA256_LEN]);

/*
** HMAC-SHA-256 (RFC 2104 with SHA-256, as RFC 4231 tests it) of `len` bytes
** at `msg` under the `keylen` bytes at `key` (both borrowed; a key longer
** than 64 bytes is hashed first) into `out`. RAG_OK or RAG_ENOMEM.
*/
int rag_digest_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                           unsigned char out[RAG_DIGEST_SHA256_LEN]);

/*
** PBKDF2 with HMAC-SHA-256 as the PRF (RFC 8018, section 5.2): `outlen`
** bytes derived from the password and salt (borrowed) with `iterations`
** rounds, into `out` (caller's). RAG_EINVAL when iterations is 0, outlen is
** 0, or outlen exceeds (2^32 - 1) blocks; RAG_ENOMEM when libcrypto fails.
*/
int rag_digest_pbkdf2_sha256(const void *password, size_t pwlen, const void *salt,
                             size_t saltlen, uint32_t iterations, unsigned char *out,
                             size_t outlen);

/*
** MD5 (RFC 1321) of `len` bytes at `data` into `out`: only for protocols
** that still require it (PostgreSQL's md5 password exchange), never for
** anything this library keys or checks. RAG_OK or RAG_ENOMEM.
*/
int rag_digest_md5(const void *data, size_t len, unsigned char out[RAG_DIGEST_MD5_LEN]);

/*
** Fills the `len` bytes at `out` from libcrypto's CSPRNG (seeded by the
** operating system): nonces for authentication. RAG_OK, or RAG_EIO when
** the generator has no entropy to give.
*/
int rag_digest_random(unsigned char *out, size_t len);

/*
** Extends `crc` (0 to start) with the CRC-32 of `len` bytes at `data`: the
** ISO-HDLC polynomial of zlib, gzip and PNG, so crc32("123456789") is
** 0xcbf43926. Pure: no state between calls.
*/
uint32_t rag_digest_crc32(uint32_t crc, const void *data, size_t len);

#endif
