// One 8-bit RGB(A) image written as PNG both ways the PNG writer can: libpng streaming through
// zlib (Sources/CPNG/shim.h, as for images over 32 MiB) and libdeflate whole
// (Sources/CPNGImageData), at levels 5 and 6, adaptive filters; the best of 7 runs each.
// Prints one line: name, size, then "path level ms bytes" for each. Built and run by
// bench/png-deflate.sh.
#include "../../Sources/CPNG/shim.h"
#include "png_image_data.h"
#include <stdio.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void measure(const char *path, const unsigned char *pixels, int width, int height, int channels, int level, int whole) {
    const int filters = 0x08 | 0x10 | 0x20 | 0x40 | 0x80;
    char message[PK_PNG_MESSAGE];
    double best = 1e9;
    size_t bytes = 0;
    for (int run = 0; run < 7; run++) {
        double start = now_ms();
        size_t data_length = 0;
        unsigned char *data = whole ? pk_png_image_data(pixels, width, height, channels, level, filters, &data_length) : NULL;
        unsigned char *png = pk_png_write(pixels, width, height, channels, level, filters, NULL, 0, data, data_length, &bytes, message);
        double took = now_ms() - start;
        if (!png) { fprintf(stderr, "%s: %s\n", path, message); exit(1); }
        free(png);
        free(data);
        if (took < best) best = took;
    }
    printf(" %s %d %.2f %zu", whole ? "libdeflate" : "zlib", level, best, bytes);
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: compare NAME RAW WIDTH HEIGHT CHANNELS\n"); return 2; }
    int width = atoi(argv[3]), height = atoi(argv[4]), channels = atoi(argv[5]);
    size_t length = (size_t)width * height * channels;
    unsigned char *pixels = malloc(length);
    FILE *file = fopen(argv[2], "rb");
    if (!file || !pixels || fread(pixels, 1, length, file) != length) { fprintf(stderr, "%s: cannot read\n", argv[2]); return 1; }
    fclose(file);
    printf("%s %dx%dx%d", argv[1], width, height, channels);
    for (int level = 5; level <= 6; level++) {
        measure(argv[1], pixels, width, height, channels, level, 0);
        measure(argv[1], pixels, width, height, channels, level, 1);
    }
    printf("\n");
    free(pixels);
    return 0;
}
