/*
** rag_digest.c: SHA-256 (FIPS 180-4) through OpenSSL's one-algorithm SHA256
** functions, with the context on the stack: thread-safe, no state kept
** between calls; HMAC (RFC 2104) and PBKDF2 (RFC 8018) built on them; MD5
** and random bytes from libcrypto; CRC-32 by tables.
*/
#include "rag_digest.h"

/*
** OpenSSL 3 marks SHA256_Init/Update/Final deprecated in favour of EVP, but
** EVP_MD_fetch loads and initialises the default provider's algorithm
** tables: about 1.9 MB of libcrypto pages resident in every process that
** hashes once, for the same block function. The one-algorithm functions run
** that function directly (SHA-NI or AVX2 where the CPU has them).
*/
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/md5.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <string.h>

#include "rag.h"

int rag_digest_sha256(const void *data, size_t len, unsigned char out[RAG_DIGEST_SHA256_LEN]) {
  SHA256_CTX ctx;
  if (SHA256_Init(&ctx) != 1 || SHA256_Update(&ctx, data, len) != 1 ||
      SHA256_Final(out, &ctx) != 1)
    return RAG_ENOMEM;
  return RAG_OK;
}

int rag_digest_sha256_parts(const void *const *data, const size_t *len, size_t n,
                            unsigned char out[RAG_DIGEST_SHA256_LEN]) {
  SHA256_CTX ctx;
  size_t i;
  int ok = SHA256_Init(&ctx) == 1;
  for (i = 0; ok && i < n; i++) ok = SHA256_Update(&ctx, data[i], len[i]) == 1;
  ok = ok && SHA256_Final(out, &ctx) == 1;
  return ok ? RAG_OK : RAG_ENOMEM;
}

/* {====== HMAC and PBKDF2 ======} */

#define BLOCK 64 /* SHA-256's block size: the HMAC key pads' length */

/*
** The two SHA-256 states after the inner and the outer key pad: what every
** HMAC under one key starts from, so PBKDF2's rounds hash only their
** message (2 blocks a round instead of 4).
*/
typedef struct hmac_key {
  SHA256_CTX inner; /* after K ^ ipad */
  SHA256_CTX outer; /* after K ^ opad */
} hmac_key;

static int hmac_init(hmac_key *h, const void *key, size_t keylen) {
  unsigned char k[BLOCK], ipad[BLOCK], opad[BLOCK];
  int i, ok;
  memset(k, 0, sizeof k);
  if (keylen > BLOCK) {
    if (rag_digest_sha256(key, keylen, k) != RAG_OK) return 0;
  } else if (keylen > 0) {
    memcpy(k, key, keylen);
  }
  for (i = 0; i < BLOCK; i++) {
    ipad[i] = (unsigned char)(k[i] ^ 0x36);
    opad[i] = (unsigned char)(k[i] ^ 0x5c);
  }
  ok = SHA256_Init(&h->inner) == 1 && SHA256_Update(&h->inner, ipad, BLOCK) == 1 &&
       SHA256_Init(&h->outer) == 1 && SHA256_Update(&h->outer, opad, BLOCK) == 1;
  memset(k, 0, sizeof k);
  memset(ipad, 0, sizeof ipad);
  memset(opad, 0, sizeof opad);
  return ok;
}

/* HMAC of the concatenation of two parts (b may be NULL) under h. */
static int hmac_run(const hmac_key *h, const void *a, size_t alen, const void *b, size_t blen,
                    unsigned char out[RAG_DIGEST_SHA256_LEN]) {
  SHA256_CTX c = h->inner;
  unsigned char mid[RAG_DIGEST_SHA256_LEN];
  int ok = SHA256_Update(&c, a, alen) == 1 && (b == NULL || SHA256_Update(&c, b, blen) == 1) &&
           SHA256_Final(mid, &c) == 1;
  c = h->outer;
  ok = ok && SHA256_Update(&c, mid, sizeof mid) == 1 && SHA256_Final(out, &c) == 1;
  return ok;
}

int rag_digest_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                           unsigned char out[RAG_DIGEST_SHA256_LEN]) {
  hmac_key h;
  int ok = hmac_init(&h, key, keylen) && hmac_run(&h, msg, len, NULL, 0, out);
  memset(&h, 0, sizeof h);
  return ok ? RAG_OK : RAG_ENOMEM;
}

/* Block i of PBKDF2: U1 = PRF(P, S || INT(i)), Uj = PRF(P, Uj-1), T = U1 ^ ... ^ Uc. */
static int pbkdf2_block(const hmac_key *h, const void *salt, size_t saltlen, uint32_t i,
                        uint32_t iterations, unsigned char t[RAG_DIGEST_SHA256_LEN]) {
  unsigned char be[4], u[RAG_DIGEST_SHA256_LEN];
  uint32_t j;
  int k;
  be[0] = (unsigned char)(i >> 24);
  be[1] = (unsigned char)(i >> 16);
  be[2] = (unsigned char)(i >> 8);
  be[3] = (unsigned char)i;
  if (!hmac_run(h, salt, saltlen, be, sizeof be, u)) return 0;
  memcpy(t, u, sizeof u);
  for (j = 1; j < iterations; j++) {
    if (!hmac_run(h, u, sizeof u, NULL, 0, u)) return 0;
    for (k = 0; k < RAG_DIGEST_SHA256_LEN; k++) t[k] ^= u[k];
  }
  return 1;
}

int rag_digest_pbkdf2_sha256(const void *password, size_t pwlen, const void *salt,
                             size_t saltlen, uint32_t iterations, unsigned char *out,
                             size_t outlen) {
  unsigned char t[RAG_DIGEST_SHA256_LEN];
  hmac_key h;
  size_t done = 0;
  uint32_t i = 1;
  int ok;
  if (iterations == 0 || outlen == 0 ||
      (outlen - 1) / RAG_DIGEST_SHA256_LEN >= (size_t)UINT32_MAX)
    return RAG_EINVAL;
  ok = hmac_init(&h, password, pwlen);
  while (ok && done < outlen) {
    size_t n = outlen - done < sizeof t ? outlen - done : sizeof t;
    ok = pbkdf2_block(&h, salt, saltlen, i++, iterations, t);
    if (ok) memcpy(out + done, t, n);
    done += n;
  }
  memset(&h, 0, sizeof h);
  memset(t, 0, sizeof t);
  return ok ? RAG_OK : RAG_ENOMEM;
}

/* {====== MD5 and random bytes ======} */

int rag_digest_md5(const void *data, size_t len, unsigned char out[RAG_DIGEST_MD5_LEN]) {
  MD5_CTX ctx;
  if (MD5_Init(&ctx) != 1 || MD5_Update(&ctx, data, len) != 1 || MD5_Final(out, &ctx) != 1)
    return RAG_ENOMEM;
  return RAG_OK;
}

int rag_digest_random(unsigned char *out, size_t len) {
  while (len > 0) {
    int n = len > 65536 ? 65536 : (int)len;
    if (RAND_bytes(out, n) != 1) return RAG_EIO;
    out += n;
    len -= (size_t)n;
  }
  return RAG_OK;
}

/* {====== CRC-32 ======} */

/* The byte-wise table of the reflected polynomial 0xedb88320. */
static const uint32_t crc_table[256] = {
    0x00000000u, 0x77073096u, 0xee0e612cu, 0x990951bau, 0x076dc419u, 0x706af48fu,
    0xe963a535u, 0x9e6495a3u, 0x0edb8832u, 0x79dcb8a4u, 0xe0d5e91eu, 0x97d2d988u,
    0x09b64c2bu, 0x7eb17cbdu, 0xe7b82d07u, 0x90bf1d91u, 0x1db71064u, 0x6ab020f2u,
    0xf3b97148u, 0x84be41deu, 0x1adad47du, 0x6ddde4ebu, 0xf4d4b551u, 0x83d385c7u,
    0x136c9856u, 0x646ba8c0u, 0xfd62f97au, 0x8a65c9ecu, 0x14015c4fu, 0x63066cd9u,
    0xfa0f3d63u, 0x8d080df5u, 0x3b6e20c8u, 0x4c69105eu, 0xd56041e4u, 0xa2677172u,
    0x3c03e4d1u, 0x4b04d447u, 0xd20d85fdu, 0xa50ab56bu, 0x35b5a8fau, 0x42b2986cu,
    0xdbbbc9d6u, 0xacbcf940u, 0x32d86ce3u, 0x45df5c75u, 0xdcd60dcfu, 0xabd13d59u,
    0x26d930acu, 0x51de003au, 0xc8d75180u, 0xbfd06116u, 0x21b4f4b5u, 0x56b3c423u,
    0xcfba9599u, 0xb8bda50fu, 0x2802b89eu, 0x5f058808u, 0xc60cd9b2u, 0xb10be924u,
    0x2f6f7c87u, 0x58684c11u, 0xc1611dabu, 0xb6662d3du, 0x76dc4190u, 0x01db7106u,
    0x98d220bcu, 0xefd5102au, 0x71b18589u, 0x06b6b51fu, 0x9fbfe4a5u, 0xe8b8d433u,
    0x7807c9a2u, 0x0f00f934u, 0x9609a88eu, 0xe10e9818u, 0x7f6a0dbbu, 0x086d3d2du,
    0x91646c97u, 0xe6635c01u, 0x6b6b51f4u, 0x1c6c6162u, 0x856530d8u, 0xf262004eu,
    0x6c0695edu, 0x1b01a57bu, 0x8208f4c1u, 0xf50fc457u, 0x65b0d9c6u, 0x12b7e950u,
    0x8bbeb8eau, 0xfcb9887cu, 0x62dd1ddfu, 0x15da2d49u, 0x8cd37cf3u, 0xfbd44c65u,
    0x4db26158u, 0x3ab551ceu, 0xa3bc0074u, 0xd4bb30e2u, 0x4adfa541u, 0x3dd895d7u,
    0xa4d1c46du, 0xd3d6f4fbu, 0x4369e96au, 0x346ed9fcu, 0xad678846u, 0xda60b8d0u,
    0x44042d73u, 0x33031de5u, 0xaa0a4c5fu, 0xdd0d7cc9u, 0x5005713cu, 0x270241aau,
    0xbe0b1010u, 0xc90c2086u, 0x5768b525u, 0x206f85b3u, 0xb966d409u, 0xce61e49fu,
    0x5edef90eu, 0x29d9c998u, 0xb0d09822u, 0xc7d7a8b4u, 0x59b33d17u, 0x2eb40d81u,
    0xb7bd5c3bu, 0xc0ba6cadu, 0xedb88320u, 0x9abfb3b6u, 0x03b6e20cu, 0x74b1d29au,
    0xead54739u, 0x9dd277afu, 0x04db2615u, 0x73dc1683u, 0xe3630b12u, 0x94643b84u,
    0x0d6d6a3eu, 0x7a6a5aa8u, 0xe40ecf0bu, 0x9309ff9du, 0x0a00ae27u, 0x7d079eb1u,
    0xf00f9344u, 0x8708a3d2u, 0x1e01f268u, 0x6906c2feu, 0xf762575du, 0x806567cbu,
    0x196c3671u, 0x6e6b06e7u, 0xfed41b76u, 0x89d32be0u, 0x10da7a5au, 0x67dd4accu,
    0xf9b9df6fu, 0x8ebeeff9u, 0x17b7be43u, 0x60b08ed5u, 0xd6d6a3e8u, 0xa1d1937eu,
    0x38d8c2c4u, 0x4fdff252u, 0xd1bb67f1u, 0xa6bc5767u, 0x3fb506ddu, 0x48b2364bu,
    0xd80d2bdau, 0xaf0a1b4cu, 0x36034af6u, 0x41047a60u, 0xdf60efc3u, 0xa867df55u,
    0x316e8eefu, 0x4669be79u, 0xcb61b38cu, 0xbc66831au, 0x256fd2a0u, 0x5268e236u,
    0xcc0c7795u, 0xbb0b4703u, 0x220216b9u, 0x5505262fu, 0xc5ba3bbeu, 0xb2bd0b28u,
    0x2bb45a92u, 0x5cb36a04u, 0xc2d7ffa7u, 0xb5d0cf31u, 0x2cd99e8bu, 0x5bdeae1du,
    0x9b64c2b0u, 0xec63f226u, 0x756aa39cu, 0x026d930au, 0x9c0906a9u, 0xeb0e363fu,
    0x72076785u, 0x05005713u, 0x95bf4a82u, 0xe2b87a14u, 0x7bb12baeu, 0x0cb61b38u,
    0x92d28e9bu, 0xe5d5be0du, 0x7cdcefb7u, 0x0bdbdf21u, 0x86d3d2d4u, 0xf1d4e242u,
    0x68ddb3f8u, 0x1fda836eu, 0x81be16cdu, 0xf6b9265bu, 0x6fb077e1u, 0x18b74777u,
    0x88085ae6u, 0xff0f6a70u, 0x66063bcau, 0x11010b5cu, 0x8f659effu, 0xf862ae69u,
    0x616bffd3u, 0x166ccf45u, 0xa00ae278u, 0xd70dd2eeu, 0x4e048354u, 0x3903b3c2u,
    0xa7672661u, 0xd06016f7u, 0x4969474du, 0x3e6e77dbu, 0xaed16a4au, 0xd9d65adcu,
    0x40df0b66u, 0x37d83bf0u, 0xa9bcae53u, 0xdebb9ec5u, 0x47b2cf7fu, 0x30b5ffe9u,
    0xbdbdf21cu, 0xcabac28au, 0x53b39330u, 0x24b4a3a6u, 0xbad03605u, 0xcdd70693u,
    0x54de5729u, 0x23d967bfu, 0xb3667a2eu, 0xc4614ab8u, 0x5d681b02u, 0x2a6f2b94u,
    0xb40bbe37u, 0xc30c8ea1u, 0x5a05df1bu, 0x2d02ef8du,

};

/*
** Slicing by 8: slice[k][b] is the CRC of byte b followed by k zero bytes, so
** that eight bytes fold in with eight lookups (Kounavis and Berry, "A
** Systematic Approach to Building High Performance Software-Based CRC
** Generators", 2005). Built once from crc_table; about 4 times the speed of
** the byte-wise loop, which still does the tails.
*/
static uint32_t slice[8][256];
static pthread_once_t slice_once = PTHREAD_ONCE_INIT;

static void slice_init(void) {
  int i, k;
  for (i = 0; i < 256; i++) slice[0][i] = crc_table[i];
  for (k = 1; k < 8; k++)
    for (i = 0; i < 256; i++)
      slice[k][i] = (slice[k - 1][i] >> 8) ^ crc_table[slice[k - 1][i] & 0xffu];
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t rag_digest_crc32(uint32_t crc, const void *data, size_t len) {
  const unsigned char *p = (const unsigned char *)data;
  crc = ~crc;
  if (len >= 64) {
    (void)pthread_once(&slice_once, slice_init);
    for (; len >= 8; len -= 8, p += 8) {
      uint32_t a = le32(p) ^ crc, b = le32(p + 4);
      crc = slice[7][a & 0xffu] ^ slice[6][(a >> 8) & 0xffu] ^ slice[5][(a >> 16) & 0xffu] ^
            slice[4][a >> 24] ^ slice[3][b & 0xffu] ^ slice[2][(b >> 8) & 0xffu] ^
            slice[1][(b >> 16) & 0xffu] ^ slice[0][b >> 24];
    }
  }
  while (len--) crc = crc_table[(crc ^ *p++) & 0xffu] ^ (crc >> 8);
  return ~crc;
}
