// Quartz 2.3.2's own fire times for triggers with a calendar: for each
// calendar of CalendarCases (alone and chained), in each zone, and each
// trigger below (cron triggers in the calendar's zone, simple triggers
// repeating forever), the first 40 fire times from each start, as
// computeFirstFireTime(calendar) and then triggered(calendar) give them.
//
//   javac -cp /usr/share/java/quartz2.jar CalendarCases.java TriggerCalendarCases.java
//   java -cp /usr/share/java/quartz2.jar:. TriggerCalendarCases > trigger-calendar-quartz-cases.tsv
//
// Output: "fires ZONE CALENDAR TRIGGER START t1,t2,..." (epoch ms); a
// trigger is "cron:EXPR" or "every:MS".
import java.util.*;
import org.quartz.impl.triggers.*;

public class TriggerCalendarCases {
    static final String[] TRIGGERS = {
        "cron:0 0 9 ? * *",
        "cron:0 0/30 * * * ?",
        "cron:0 30 1 * * ?",
        "cron:0 15 10 L * ?",
        "every:2700000",
        "every:25200000",
    };
    static final long[] STARTS = {
        1767225600000L, // 2026-01-01T00:00:00Z
        1772755200000L, // 2026-03-06T00:00:00Z, before the March shifts
        1792713600000L, // 2026-10-23T00:00:00Z, before the October shifts
    };

    public static void main(String[] a) throws Exception {
        System.out.println("# Quartz 2.3.2's fire times of triggers with a calendar, by tools/quartz-calendars/TriggerCalendarCases.java");
        for (String zone : CalendarCases.ZONES) {
            TimeZone tz = TimeZone.getTimeZone(zone);
            for (String spec : CalendarCases.SPECS) {
                org.quartz.Calendar cal = CalendarCases.build(spec, tz);
                for (String trigger : TRIGGERS) {
                    for (long start : STARTS) {
                        org.quartz.spi.OperableTrigger t;
                        if (trigger.startsWith("cron:")) {
                            CronTriggerImpl c = new CronTriggerImpl();
                            c.setCronExpression(trigger.substring(5));
                            c.setTimeZone(tz);
                            c.setStartTime(new Date(start));
                            t = c;
                        } else {
                            SimpleTriggerImpl s = new SimpleTriggerImpl();
                            s.setRepeatInterval(Long.parseLong(trigger.substring(6)));
                            s.setRepeatCount(SimpleTriggerImpl.REPEAT_INDEFINITELY);
                            s.setStartTime(new Date(start));
                            t = s;
                        }
                        StringBuilder line = new StringBuilder("fires\t" + zone + "\t" + spec + "\t" + trigger + "\t" + start + "\t");
                        Date next = t.computeFirstFireTime(cal);
                        for (int i = 0; i < 40 && next != null; i++) {
                            line.append(next.getTime()).append(',');
                            t.triggered(cal);
                            next = t.getNextFireTime();
                        }
                        line.setLength(line.length() - 1);
                        System.out.println(line);
                    }
                }
            }
        }
    }
}
