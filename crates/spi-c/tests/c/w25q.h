/* A driver for W25Q-class SPI NOR flash (Winbond W25Q..JV and parts with the same commands,
 * 3-byte addresses, 256-byte pages, 4 KiB sectors), written as firmware drivers are: against a
 * small bus interface the board provides, so the same code runs on a real SPI controller or on
 * ssdlab's emulated chip (driver_test.c). No globals: all state is in a w25q_dev. */
#ifndef W25Q_H
#define W25Q_H

#include <stddef.h>
#include <stdint.h>

/* What the board provides. */
typedef struct {
    void *ctx;
    /* Clocks len bytes with CS# low: tx out (NULL: FFh bytes), the chip's answer into rx (NULL:
     * discard). With more != 0, CS# stays low and the next call continues the transaction;
     * otherwise CS# goes high at the end. Returns 0, or nonzero when the bus failed. */
    int (*xfer)(void *ctx, const uint8_t *tx, uint8_t *rx, size_t len, int more);
    void (*delay_us)(void *ctx, uint32_t us);
} w25q_bus;

typedef struct {
    const w25q_bus *bus;
    uint8_t jedec_id[3];
    uint32_t size_bytes;
} w25q_dev;

#define W25Q_OK 0
#define W25Q_ERR_BUS (-1)     /* the bus failed */
#define W25Q_ERR_TIMEOUT (-2) /* the chip stayed busy past the timeout */
#define W25Q_ERR_WEL (-3)     /* write enable did not set WEL (protected, busy or not ready) */
#define W25Q_ERR_ID (-4)      /* no W25Q-class chip answered the JEDEC ID */
#define W25Q_ERR_RANGE (-5)   /* an address range outside the chip */

#define W25Q_PAGE_BYTES 256u
#define W25Q_SECTOR_BYTES 4096u

#define W25Q_SR1_WIP 0x01u
#define W25Q_SR1_WEL 0x02u

/* Busy-wait limits: above the datasheet maximums (W25Q128JV: tPP 3 ms, tSE 400 ms), and how
 * often the status register is polled meanwhile. */
#define W25Q_PROGRAM_TIMEOUT_US 5000u
#define W25Q_PROGRAM_POLL_US 20u
#define W25Q_ERASE_TIMEOUT_US 500000u
#define W25Q_ERASE_POLL_US 1000u

/* Reads the JEDEC ID and sizes the device from it; W25Q_ERR_ID unless the manufacturer is
 * Winbond (EFh) and the capacity fits 3-byte addresses. */
int w25q_init(w25q_dev *dev, const w25q_bus *bus);
/* 9Fh: manufacturer, memory type, capacity. */
int w25q_read_jedec_id(w25q_dev *dev, uint8_t id[3]);
/* 05h: status register 1. */
int w25q_read_status(w25q_dev *dev, uint8_t *sr1);
/* Polls WIP every poll_us until it clears; W25Q_ERR_TIMEOUT after timeout_us. */
int w25q_wait_ready(w25q_dev *dev, uint32_t timeout_us, uint32_t poll_us);
/* 06h, then checks that WEL is set. */
int w25q_write_enable(w25q_dev *dev);
/* 20h on the sector holding addr, without waiting for it to finish. */
int w25q_sector_erase_start(w25q_dev *dev, uint32_t addr);
/* 20h on the sector holding addr, and waits for it. */
int w25q_sector_erase(w25q_dev *dev, uint32_t addr);
/* 02h, one page at a time (split at page boundaries), each waited for. The range must be
 * erased. */
int w25q_program(w25q_dev *dev, uint32_t addr, const uint8_t *data, size_t len);
/* 03h. */
int w25q_read(w25q_dev *dev, uint32_t addr, uint8_t *buf, size_t len);
/* The name of a W25Q_* code. */
const char *w25q_strerror(int err);

#endif
