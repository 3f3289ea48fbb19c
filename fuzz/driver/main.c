/*
** fuzz/driver/main.c: runs a libFuzzer harness over the files of some
** directories ROUNDS times, for sanitizers that libFuzzer's coverage
** counters confuse: under ThreadSanitizer those counters are themselves
** written by every thread. Usage: harness ROUNDS DIR...
*/
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  static uint8_t buf[1 << 16];
  int rounds, r, a, n = 0;
  if (argc < 3) {
    fprintf(stderr, "usage: %s ROUNDS DIR...\n", argv[0]);
    return 2;
  }
  rounds = atoi(argv[1]);
  LLVMFuzzerInitialize(&argc, &argv);
  for (r = 0; r < rounds; r++)
    for (a = 2; a < argc; a++) {
      DIR *d = opendir(argv[a]);
      struct dirent *e;
      while (d != NULL && (e = readdir(d)) != NULL) {
        char path[4096];
        FILE *f;
        size_t len;
        snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
        if ((f = fopen(path, "rb")) == NULL) continue;
        len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        if (len > 0) {
          LLVMFuzzerTestOneInput(buf, len);
          n++;
        }
      }
      if (d != NULL) closedir(d);
    }
  printf("%d inputs\n", n);
  return 0;
}
