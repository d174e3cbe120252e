/* C API of ssdlab's emulated SPI NOR flash chip. Link with -lssdlab_spi_c
 * (target/release/libssdlab_spi_c.so).
 *
 * For unit-testing C firmware drivers on a laptop: the chip is a state machine of a real part
 * (W25Q128JV, W25Q16JV, MX25L6436F; crates/spi/src/parts.rs) that answers byte by byte as the
 * datasheet says, stays busy (WIP = 1) for the datasheet's program and erase times, and loses
 * power when told to, leaving interrupted programs and erases half done. Time is simulated: it
 * advances by the bytes clocked (at the SPI clock, 8 MHz unless set) and by
 * ssdlab_spi_delay_ns(), never by sleeping, so a 45 ms sector erase costs no wall time.
 *
 * Calls returning int return 0 (or a count) on success and a negative SSDLAB_SPI_ERR_* code on
 * failure; calls returning a pointer return NULL on failure. ssdlab_spi_last_error() describes
 * the last failure of the calling thread. No call panics or aborts on bad arguments.
 *
 * A handle is not thread-safe: use each from one thread at a time. */
#ifndef SSDLAB_SPI_H
#define SSDLAB_SPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One emulated chip. */
typedef struct ssdlab_spi ssdlab_spi;

/* What chip select (CS#) does around a ssdlab_spi_transfer(). */
#define SSDLAB_SPI_CS_FRAME 0   /* CS# low, the bytes, CS# high: one whole transaction */
#define SSDLAB_SPI_CS_HOLD 1    /* CS# low (if not already) and kept low: the next call continues */
#define SSDLAB_SPI_CS_RELEASE 2 /* CS# low (if not already), the bytes, CS# high */

#define SSDLAB_SPI_OK 0
#define SSDLAB_SPI_ERR_ARG (-1)      /* a bad argument (NULL handle, unknown cs, out of range) */
#define SSDLAB_SPI_ERR_POWER (-2)    /* the chip had no power during the transfer */
#define SSDLAB_SPI_ERR_IO (-3)       /* the image or trace file could not be written */
#define SSDLAB_SPI_ERR_INTERNAL (-4) /* the emulator failed; the handle is unusable (close it) */

/* Options of ssdlab_spi_open_with(). Zero and NULL fields mean the default, so
 * `ssdlab_spi_options o = {0};` is the same as ssdlab_spi_open(). */
typedef struct {
    /* Busy time of programs, erases and status writes: "datasheet" (the typical column, the
     * default), "max" (the maximum column), "instant" (no busy time; WIP never shows) or
     * "scale=X" (X times the typical column, 0 <= X <= 1000). */
    const char *timing;
    /* Seed of the power model's random choices: which bits an interrupted operation leaves
     * changed. The same seed and the same calls give the same chip. */
    uint64_t power_seed;
    /* Erases of a sector past its endurance rating: "counted" (the default: only counted),
     * "erase-fails" (the erase silently leaves the sector as it was) or "bits-stick" (each
     * one leaves one more bit of the sector stuck at 0). */
    const char *wear_out;
    /* Endurance rating in erase cycles per sector (0: the part's, 100000 for the presets). */
    uint32_t endurance_cycles;
    /* SPI clock in Hz, which sets how long each clocked byte takes (0: 8 MHz). */
    uint32_t clock_hz;
} ssdlab_spi_options;

/* The message of the calling thread's last failure ("" if none). Valid until the thread's next
 * failing call. */
const char *ssdlab_spi_last_error(void);

/* A chip by part name (case-insensitive: "W25Q128JV", "W25Q16JV", "MX25L6436F"), powered and
 * idle at simulated time 0. image: NULL for an erased (all FFh) chip in memory, or a file that
 * holds the array (created erased if missing; it must be the part's size if present); every
 * program and erase reaches the file as it starts, and the non-volatile status registers are
 * kept next to it in IMAGE.status. NULL on failure (unknown chip: the message lists the known
 * ones). */
ssdlab_spi *ssdlab_spi_open(const char *chip, const char *image);
/* As ssdlab_spi_open(), with options (opts may be NULL: the defaults). */
ssdlab_spi *ssdlab_spi_open_with(const char *chip, const char *image, const ssdlab_spi_options *opts);
/* Frees the chip (NULL is ignored). Does not sync the image to disk: see ssdlab_spi_flush(). */
void ssdlab_spi_close(ssdlab_spi *f);

/* Clocks len bytes full duplex: tx[i] out on MOSI (tx NULL: FFh bytes), what the chip drives
 * on MISO into rx[i] (rx NULL: discarded; rx may be tx). cs is SSDLAB_SPI_CS_*: a command
 * phase sent with SSDLAB_SPI_CS_HOLD and a data phase with SSDLAB_SPI_CS_RELEASE make one
 * transaction, as on a real controller. Latched commands (program, erase, status write) start
 * when CS# goes high. len may be 0 (with SSDLAB_SPI_CS_RELEASE: only raise CS#).
 * Returns 0; SSDLAB_SPI_ERR_POWER when the chip had no power at some point of the transaction
 * so far (rx then holds FFh where the chip was dead, as a pulled-up MISO reads; a transaction
 * that lost power stays lost until CS# goes high, even if power returns); SSDLAB_SPI_ERR_ARG
 * for a bad cs, or for SSDLAB_SPI_CS_FRAME while a held transaction is open (nothing is
 * clocked then). */
int ssdlab_spi_transfer(ssdlab_spi *f, int cs, const uint8_t *tx, uint8_t *rx, size_t len);

/* Lets ns nanoseconds of simulated time pass (a firmware's delay or busy-wait). */
void ssdlab_spi_delay_ns(ssdlab_spi *f, uint64_t ns);
/* Simulated time since the chip was opened, in nanoseconds (0 for a NULL handle). */
uint64_t ssdlab_spi_elapsed_ns(ssdlab_spi *f);

/* Power fails now: a running program or erase stops where it is, nothing answers until
 * ssdlab_spi_power_up(). */
void ssdlab_spi_power_cut(ssdlab_spi *f);
/* Power fails as the n-th transaction from now begins (n >= 1; 1: the next one; a held open
 * transaction does not count). Replaces any planned cut. */
int ssdlab_spi_power_cut_at_frame(ssdlab_spi *f, uint64_t n);
/* Power fails when simulated time reaches t ns (absolute, as ssdlab_spi_elapsed_ns() counts;
 * now if t has passed), in the middle of a transfer or a delay if that is where t falls.
 * Replaces any planned cut. */
int ssdlab_spi_power_cut_at_ns(ssdlab_spi *f, uint64_t t);
/* Forgets a planned cut. */
void ssdlab_spi_cancel_power_cut(ssdlab_spi *f);
/* Power returns (harmless when powered): status registers from their non-volatile copy,
 * WEL = 0, nothing running. As on the real part, every command is ignored for tVSL and every
 * write command (WREN included) until tPUW (W25Q128JV: 20 us and 5 ms). */
void ssdlab_spi_power_up(ssdlab_spi *f);
/* 1 if powered, 0 if not, SSDLAB_SPI_ERR_ARG for a NULL handle. */
int ssdlab_spi_powered(ssdlab_spi *f);

/* Copies len bytes of the array from addr into buf as they are now, without a transaction and
 * without simulated time (a debugger's view, to check what a driver did). */
int ssdlab_spi_peek(ssdlab_spi *f, uint32_t addr, uint8_t *buf, size_t len);

/* The chip's counters as one JSON object (frames, programs, sector_erases, busy_ns,
 * power_cuts, interrupted_erases, ...), with "elapsed_ns", "powered" and "last_power_cut"
 * (null, or what the last cut interrupted: t_ns, frame, interrupted, range, fraction,
 * bits_short). Like snprintf: writes at most len bytes including the terminating NUL (buf may
 * be NULL when len is 0) and returns the length of the whole JSON text. */
int ssdlab_spi_stats_json(ssdlab_spi *f, char *buf, size_t len);

/* Writes a trace of every transaction and delay (JSON lines, simulated timestamps, what the
 * chip did with each) to path, replacing any earlier trace. */
int ssdlab_spi_trace_to(ssdlab_spi *f, const char *path);

/* Syncs the image (and the trace) to disk. 0 when there is no image. */
int ssdlab_spi_flush(ssdlab_spi *f);

#ifdef __cplusplus
}
#endif
#endif
