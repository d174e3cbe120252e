/* W25Q-class SPI NOR driver (see w25q.h). */
#include "w25q.h"

#define CMD_WRITE_ENABLE 0x06u
#define CMD_READ_STATUS1 0x05u
#define CMD_PAGE_PROGRAM 0x02u
#define CMD_SECTOR_ERASE 0x20u
#define CMD_READ 0x03u
#define CMD_JEDEC_ID 0x9Fu

#define MFR_WINBOND 0xEFu

/* One transaction: a command phase, then a data phase (tx or rx, either may be NULL). CS# is
 * raised even when the command phase fails, so the next command starts clean. */
static int transaction(w25q_dev *dev, const uint8_t *cmd, size_t cmd_len, const uint8_t *tx, uint8_t *rx, size_t len) {
    const w25q_bus *bus = dev->bus;
    if (bus->xfer(bus->ctx, cmd, NULL, cmd_len, len > 0) != 0) {
        if (len > 0) (void)bus->xfer(bus->ctx, NULL, NULL, 0, 0);
        return W25Q_ERR_BUS;
    }
    if (len > 0 && bus->xfer(bus->ctx, tx, rx, len, 0) != 0) return W25Q_ERR_BUS;
    return W25Q_OK;
}

static void put_addr(uint8_t *cmd, uint8_t op, uint32_t addr) {
    cmd[0] = op;
    cmd[1] = (uint8_t)(addr >> 16);
    cmd[2] = (uint8_t)(addr >> 8);
    cmd[3] = (uint8_t)addr;
}

static int in_range(const w25q_dev *dev, uint32_t addr, size_t len) {
    return addr < dev->size_bytes && len <= (size_t)(dev->size_bytes - addr);
}

int w25q_read_jedec_id(w25q_dev *dev, uint8_t id[3]) {
    const uint8_t cmd = CMD_JEDEC_ID;
    return transaction(dev, &cmd, 1, NULL, id, 3);
}

int w25q_init(w25q_dev *dev, const w25q_bus *bus) {
    dev->bus = bus;
    dev->size_bytes = 0;
    int r = w25q_read_jedec_id(dev, dev->jedec_id);
    if (r != W25Q_OK) return r;
    /* Capacity code n means 2^n bytes; 3-byte addressing reaches 16 MiB (n = 18h). */
    uint8_t n = dev->jedec_id[2];
    if (dev->jedec_id[0] != MFR_WINBOND || n < 0x11 || n > 0x18) return W25Q_ERR_ID;
    dev->size_bytes = 1u << n;
    return W25Q_OK;
}

int w25q_read_status(w25q_dev *dev, uint8_t *sr1) {
    const uint8_t cmd = CMD_READ_STATUS1;
    return transaction(dev, &cmd, 1, NULL, sr1, 1);
}

int w25q_wait_ready(w25q_dev *dev, uint32_t timeout_us, uint32_t poll_us) {
    uint32_t waited = 0;
    for (;;) {
        uint8_t sr1;
        int r = w25q_read_status(dev, &sr1);
        if (r != W25Q_OK) return r;
        if ((sr1 & W25Q_SR1_WIP) == 0) return W25Q_OK;
        if (waited >= timeout_us) return W25Q_ERR_TIMEOUT;
        dev->bus->delay_us(dev->bus->ctx, poll_us);
        waited += poll_us;
    }
}

int w25q_write_enable(w25q_dev *dev) {
    const uint8_t cmd = CMD_WRITE_ENABLE;
    int r = transaction(dev, &cmd, 1, NULL, NULL, 0);
    if (r != W25Q_OK) return r;
    uint8_t sr1;
    r = w25q_read_status(dev, &sr1);
    if (r != W25Q_OK) return r;
    return (sr1 & W25Q_SR1_WEL) ? W25Q_OK : W25Q_ERR_WEL;
}

int w25q_sector_erase_start(w25q_dev *dev, uint32_t addr) {
    if (!in_range(dev, addr, 1)) return W25Q_ERR_RANGE;
    int r = w25q_write_enable(dev);
    if (r != W25Q_OK) return r;
    uint8_t cmd[4];
    put_addr(cmd, CMD_SECTOR_ERASE, addr);
    return transaction(dev, cmd, sizeof cmd, NULL, NULL, 0);
}

int w25q_sector_erase(w25q_dev *dev, uint32_t addr) {
    int r = w25q_sector_erase_start(dev, addr);
    if (r != W25Q_OK) return r;
    return w25q_wait_ready(dev, W25Q_ERASE_TIMEOUT_US, W25Q_ERASE_POLL_US);
}

int w25q_program(w25q_dev *dev, uint32_t addr, const uint8_t *data, size_t len) {
    if (!in_range(dev, addr, len)) return W25Q_ERR_RANGE;
    while (len > 0) {
        /* A page program wraps at the page end: never cross one. */
        size_t chunk = W25Q_PAGE_BYTES - addr % W25Q_PAGE_BYTES;
        if (chunk > len) chunk = len;
        int r = w25q_write_enable(dev);
        if (r != W25Q_OK) return r;
        uint8_t cmd[4];
        put_addr(cmd, CMD_PAGE_PROGRAM, addr);
        r = transaction(dev, cmd, sizeof cmd, data, NULL, chunk);
        if (r != W25Q_OK) return r;
        r = w25q_wait_ready(dev, W25Q_PROGRAM_TIMEOUT_US, W25Q_PROGRAM_POLL_US);
        if (r != W25Q_OK) return r;
        addr += (uint32_t)chunk;
        data += chunk;
        len -= chunk;
    }
    return W25Q_OK;
}

int w25q_read(w25q_dev *dev, uint32_t addr, uint8_t *buf, size_t len) {
    if (!in_range(dev, addr, len)) return W25Q_ERR_RANGE;
    if (len == 0) return W25Q_OK;
    uint8_t cmd[4];
    put_addr(cmd, CMD_READ, addr);
    return transaction(dev, cmd, sizeof cmd, NULL, buf, len);
}

const char *w25q_strerror(int err) {
    switch (err) {
    case W25Q_OK: return "ok";
    case W25Q_ERR_BUS: return "bus error";
    case W25Q_ERR_TIMEOUT: return "timeout";
    case W25Q_ERR_WEL: return "write enable did not take";
    case W25Q_ERR_ID: return "unexpected JEDEC ID";
    case W25Q_ERR_RANGE: return "address out of range";
    default: return "unknown error";
    }
}
