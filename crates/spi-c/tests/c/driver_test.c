/* The W25Q driver (w25q.c) against the emulated W25Q128JV: identification, erase, programs
 * across page boundaries, read-back and datasheet timing; then a power cut in the middle of a
 * sector erase, what the firmware sees of it, power-up and recovery. With an image path
 * argument the chip lives in that file and the data must survive reopening it.
 * Prints "ok" and exits 0, or names the failed check and exits 1. */
#include <stdio.h>
#include <string.h>

#include "ssdlab_spi.h"
#include "w25q.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "failed: %s (line %d): %s\n", #c, __LINE__, ssdlab_spi_last_error()); return 1; } } while (0)
/* A driver call that must succeed. */
#define CHECK_OK(call) do { int r_ = (call); if (r_ != W25Q_OK) { fprintf(stderr, "failed: %s = %s (line %d): %s\n", #call, w25q_strerror(r_), __LINE__, ssdlab_spi_last_error()); return 1; } } while (0)

#define US 1000ull
#define MS 1000000ull

/* W25Q128JV typical column (crates/spi/src/parts.rs): tSE, tPP, tBP1, tBP2, and tPUW. */
#define T_SE (45 * MS)
#define T_PP (700 * US)
#define T_BP1 (30 * US)
#define T_BP2 2500ull
#define T_PUW (5 * MS)

#define SECTOR 0x012000u
#define DATA_AT (SECTOR + 0x80u) /* 128 bytes, three whole pages, 128 bytes */
#define DATA_LEN 1024u

/* The board side of the driver: the emulated chip as its SPI bus. */
static int bus_xfer(void *ctx, const uint8_t *tx, uint8_t *rx, size_t len, int more) {
    return ssdlab_spi_transfer(ctx, more ? SSDLAB_SPI_CS_HOLD : SSDLAB_SPI_CS_RELEASE, tx, rx, len);
}

static void bus_delay_us(void *ctx, uint32_t us) {
    ssdlab_spi_delay_ns(ctx, (uint64_t)us * US);
}

/* Busy time of programming len bytes at addr page by page, by the datasheet. */
static uint64_t program_ns(uint32_t addr, uint32_t len) {
    uint64_t ns = 0;
    while (len > 0) {
        uint32_t n = W25Q_PAGE_BYTES - addr % W25Q_PAGE_BYTES;
        if (n > len) n = len;
        uint64_t partial = T_BP1 + (uint64_t)(n - 1) * T_BP2;
        ns += n == W25Q_PAGE_BYTES || partial > T_PP ? T_PP : partial;
        addr += n;
        len -= n;
    }
    return ns;
}

static int all_ff(const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xFF) return 0;
    return 1;
}

/* Erases SECTOR, programs the data and reads it back (through the driver and the debugger's
 * view); *took_ns: the simulated time the erase and the programs took. */
static int write_data(w25q_dev *dev, ssdlab_spi *f, const uint8_t *data, uint8_t *sector, uint64_t *took_ns) {
    uint64_t t = ssdlab_spi_elapsed_ns(f);
    CHECK_OK(w25q_sector_erase(dev, SECTOR));
    *took_ns = ssdlab_spi_elapsed_ns(f) - t;
    CHECK_OK(w25q_read(dev, SECTOR, sector, W25Q_SECTOR_BYTES));
    CHECK(all_ff(sector, W25Q_SECTOR_BYTES));
    t = ssdlab_spi_elapsed_ns(f);
    CHECK_OK(w25q_program(dev, DATA_AT, data, DATA_LEN));
    *took_ns += ssdlab_spi_elapsed_ns(f) - t;
    CHECK_OK(w25q_read(dev, SECTOR, sector, W25Q_SECTOR_BYTES));
    CHECK(memcmp(sector + (DATA_AT - SECTOR), data, DATA_LEN) == 0);
    CHECK(all_ff(sector, DATA_AT - SECTOR));
    CHECK(all_ff(sector + (DATA_AT - SECTOR) + DATA_LEN, W25Q_SECTOR_BYTES - (DATA_AT - SECTOR) - DATA_LEN));
    uint8_t peek[W25Q_SECTOR_BYTES];
    CHECK(ssdlab_spi_peek(f, SECTOR, peek, sizeof peek) == SSDLAB_SPI_OK);
    CHECK(memcmp(peek, sector, sizeof peek) == 0);
    return 0;
}

int main(int argc, char **argv) {
    const char *image = argc > 1 ? argv[1] : NULL;

    CHECK(ssdlab_spi_open("W25Q999", NULL) == NULL);
    CHECK(strstr(ssdlab_spi_last_error(), "W25Q128JV") != NULL);

    ssdlab_spi *f = ssdlab_spi_open("W25Q128JV", image);
    CHECK(f != NULL);
    const w25q_bus bus = {f, bus_xfer, bus_delay_us};
    w25q_dev dev;
    CHECK_OK(w25q_init(&dev, &bus));
    CHECK(dev.jedec_id[0] == 0xEF && dev.jedec_id[1] == 0x40 && dev.jedec_id[2] == 0x18);
    CHECK(dev.size_bytes == 16u << 20);
    CHECK(w25q_read(&dev, dev.size_bytes - 1, NULL, 2) == W25Q_ERR_RANGE);

    uint8_t data[DATA_LEN];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 31 + 7);
    uint8_t sector[W25Q_SECTOR_BYTES];

    /* Erase, program, read back. The erase and the programs took at least their datasheet
     * busy time, and not much more: each wait ends within a poll period, and the bytes clocked
     * (8 MHz: 1 us each) add about 1 ms. */
    uint64_t took;
    if (write_data(&dev, f, data, sector, &took)) return 1;
    uint64_t busy = T_SE + program_ns(DATA_AT, DATA_LEN);
    CHECK(busy == T_SE + 3 * T_PP + 2 * (T_BP1 + 127 * T_BP2));
    CHECK(took >= busy);
    CHECK(took < busy + 3 * MS);

    /* Power fails 10 ms into a sector erase, while the driver polls for it. */
    uint8_t before[W25Q_SECTOR_BYTES];
    memcpy(before, sector, sizeof before);
    CHECK_OK(w25q_sector_erase_start(&dev, SECTOR));
    uint64_t t1 = ssdlab_spi_elapsed_ns(f);
    CHECK(ssdlab_spi_power_cut_at_ns(f, t1 + 10 * MS) == SSDLAB_SPI_OK);
    CHECK(w25q_wait_ready(&dev, W25Q_ERASE_TIMEOUT_US, W25Q_ERASE_POLL_US) == W25Q_ERR_BUS);
    uint64_t t2 = ssdlab_spi_elapsed_ns(f);
    CHECK(t2 >= t1 + 10 * MS && t2 <= t1 + 10 * MS + W25Q_ERASE_POLL_US * US + 100 * US);
    CHECK(ssdlab_spi_powered(f) == 0);

    /* A dead bus: every transfer fails and MISO reads FFh. */
    uint8_t tx[4] = {0x9F, 0, 0, 0}, rx[4] = {0};
    CHECK(ssdlab_spi_transfer(f, SSDLAB_SPI_CS_FRAME, tx, rx, sizeof tx) == SSDLAB_SPI_ERR_POWER);
    CHECK(rx[0] == 0xFF && rx[1] == 0xFF && rx[2] == 0xFF && rx[3] == 0xFF);
    CHECK(ssdlab_spi_transfer(f, SSDLAB_SPI_CS_HOLD, tx, NULL, 1) == SSDLAB_SPI_ERR_POWER);
    CHECK(ssdlab_spi_transfer(f, SSDLAB_SPI_CS_RELEASE, NULL, rx, 3) == SSDLAB_SPI_ERR_POWER);
    uint8_t id[3];
    CHECK(w25q_read_jedec_id(&dev, id) == W25Q_ERR_BUS);
    char stats[2048];
    int n = ssdlab_spi_stats_json(f, stats, sizeof stats);
    CHECK(n > 0 && (size_t)n < sizeof stats);
    CHECK(strstr(stats, "\"power_cuts\":1") != NULL);
    CHECK(strstr(stats, "\"interrupted_erases\":1") != NULL);
    CHECK(strstr(stats, "\"interrupted\":\"erase\"") != NULL);

    /* Power returns: writes are refused until tPUW, reads work after tVSL. */
    ssdlab_spi_power_up(f);
    uint64_t t_up = ssdlab_spi_elapsed_ns(f);
    CHECK(ssdlab_spi_powered(f) == 1);
    ssdlab_spi_delay_ns(f, 100 * US);
    CHECK_OK(w25q_read_jedec_id(&dev, id));
    CHECK(id[0] == 0xEF && id[1] == 0x40 && id[2] == 0x18);
    CHECK(w25q_write_enable(&dev) == W25Q_ERR_WEL);
    ssdlab_spi_delay_ns(f, t_up + T_PUW - ssdlab_spi_elapsed_ns(f));

    /* The interrupted erase left the sector neither erased nor as it was. */
    CHECK_OK(w25q_read(&dev, SECTOR, sector, sizeof sector));
    CHECK(!all_ff(sector, sizeof sector));
    CHECK(memcmp(sector, before, sizeof sector) != 0);

    /* Recovery: erase and program again. */
    if (write_data(&dev, f, data, sector, &took)) return 1;
    CHECK(took >= busy);
    CHECK(ssdlab_spi_flush(f) == SSDLAB_SPI_OK);
    ssdlab_spi_close(f);

    if (image != NULL) {
        f = ssdlab_spi_open("W25Q128JV", image);
        CHECK(f != NULL);
        const w25q_bus bus2 = {f, bus_xfer, bus_delay_us};
        CHECK_OK(w25q_init(&dev, &bus2));
        uint8_t again[DATA_LEN];
        CHECK_OK(w25q_read(&dev, DATA_AT, again, sizeof again));
        CHECK(memcmp(again, data, sizeof again) == 0);
        ssdlab_spi_close(f);
    }
    puts("ok");
    return 0;
}
